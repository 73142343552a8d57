"""Value types of the executor's API: batch inputs, outputs and per-session sampling."""

from __future__ import annotations

import math
from dataclasses import dataclass

from cellspec.errors import InvalidArgument

MIN_TEMPERATURE = 1e-4


@dataclass(frozen=True)
class Sampling:
    """How one session draws tokens. temperature 0 = greedy; top_k 0 = no top-k filter."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        t, p, k = self.temperature, self.top_p, self.top_k
        if not _is_number(t) or math.isnan(t) or t < 0 or math.isinf(t):
            raise InvalidArgument(f"temperature {t!r}: expected a finite number >= 0")
        if 0 < t < MIN_TEMPERATURE:  # logits / t would overflow float32
            raise InvalidArgument(f"temperature {t!r}: expected 0 (greedy) or >= "
                                  f"{MIN_TEMPERATURE}")
        if not _is_number(p) or math.isnan(p) or not 0.0 <= p <= 1.0:
            raise InvalidArgument(f"top_p {p!r}: expected a number in [0, 1]")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise InvalidArgument(f"top_k {k!r}: expected an integer >= 0 (0 = off)")

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0


def _is_number(value: object) -> bool:
    """An int or a float; a bool is neither here (True is not a temperature)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class BatchInput:
    """Feed `tokens` to session `sid` starting at `position` (<= its frontier; a smaller position
    rewinds the session there first). With `produce_output`, sample one token after the last."""

    sid: int
    tokens: tuple[int, ...]
    position: int
    produce_output: bool = True


@dataclass(frozen=True)
class Output:
    """The tokens one input produced: one from a plain step, accepted + 1 from a DFlash cycle.
    The last token is not yet fed to the target: it is the session's next input."""

    sid: int
    tokens: tuple[int, ...]

    @property
    def token(self) -> int:
        return self.tokens[-1]


def replaced(record, **changes):
    """`dataclasses.replace` of a frozen dataclass without `__post_init__`, for the host's
    time (a tree round replaces three): its fields copied, `changes` (fields it has) set,
    without replace's checks and `__init__`."""
    assert changes.keys() <= record.__dict__.keys(), f"not fields: {set(changes)}"
    new = object.__new__(type(record))
    new.__dict__.update(record.__dict__, **changes)
    return new
