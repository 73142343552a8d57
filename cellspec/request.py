"""One generation request: its sampling parameters, its growing output, and when it stops.

Text is released in order and never past a point where a stop string could still begin: the
last `len(longest stop) - 1` characters are held back until the next token rules a stop out, so
streamed deltas always concatenate to the final text.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from cellspec.errors import InvalidArgument
from cellspec.runtime.types import Sampling
from cellspec.tokenizer import IncrementalDetokenizer

FINISH_STOP = "stop"  # an eos token or a stop string
FINISH_LENGTH = "length"  # max_tokens, or the session's token budget


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples and when it stops. temperature 0 = greedy; top_k 0 = off;
    seed None = a fresh random seed; stop: strings that end the text (excluded from it)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 64
    stop: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        Sampling(self.temperature, self.top_p, self.top_k)  # validates these three
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise InvalidArgument(f"max_tokens {self.max_tokens!r}: expected an integer >= 1")
        stop = (self.stop,) if isinstance(self.stop, str) else self.stop
        if not isinstance(stop, (tuple, list)) or not all(isinstance(s, str) and s for s in stop):
            shown = list(stop) if isinstance(stop, tuple) else stop
            raise InvalidArgument(f"stop {shown!r}: expected non-empty strings")
        object.__setattr__(self, "stop", tuple(stop))
        if self.seed is not None and not (_is_int(self.seed) and 0 <= self.seed < 2**64):
            raise InvalidArgument(f"seed {self.seed!r}: expected None or an integer in [0, 2**64)")
        if not isinstance(self.ignore_eos, bool):
            raise InvalidArgument(f"ignore_eos {self.ignore_eos!r}: expected a bool")

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k)


@dataclass(frozen=True)
class RequestOutput:
    """token_ids: every sampled token, the eos that ended the request included; text: their
    decoding without special tokens, cut before a stop string."""

    prompt: str
    prompt_token_ids: tuple[int, ...]
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length"


@dataclass
class Request:
    prompt: str
    prompt_token_ids: tuple[int, ...]
    params: SamplingParams
    detokenizer: IncrementalDetokenizer
    token_ids: list[int] = field(default_factory=list)
    text: str = ""  # released text
    held: str = ""  # decoded, not yet released: a stop string may begin here
    unread: str = ""  # released and not yet taken by a stream
    finish_reason: str | None = None
    sid: int | None = None  # the executor session while the request runs
    num_computed: int = 0  # tokens in the session's cache

    @property
    def is_prefilled(self) -> bool:
        return self.num_computed >= len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.token_ids)

    def append(self, token: int, eos_token_ids: Collection[int], budget: int) -> None:
        """Take one sampled token; `budget` bounds prompt + output (the session's token budget)."""
        assert self.finish_reason is None
        self.token_ids.append(token)
        if token in eos_token_ids and not self.params.ignore_eos:
            self.finish(FINISH_STOP)
            return
        self.held += self.detokenizer.add(token)
        if self._cut_at_stop():
            return
        if len(self.token_ids) >= self.params.max_tokens or self.num_tokens >= budget:
            self.finish(FINISH_LENGTH)
            return
        keep = max((len(s) for s in self.params.stop), default=1) - 1
        self._release(len(self.held) - keep)

    def finish(self, reason: str) -> None:
        self.held += self.detokenizer.flush()
        if not self._cut_at_stop():
            self._release(len(self.held))
            self.finish_reason = reason

    def take_unread(self) -> str:
        text, self.unread = self.unread, ""
        return text

    def output(self) -> RequestOutput:
        assert self.finish_reason is not None
        return RequestOutput(self.prompt, self.prompt_token_ids, self.text,
                             tuple(self.token_ids), self.finish_reason)

    def _cut_at_stop(self) -> bool:
        """Finish at the earliest stop string in the held text, releasing what precedes it."""
        hits = [i for i in (self.held.find(s) for s in self.params.stop) if i >= 0]
        if not hits:
            return False
        self.held = self.held[:min(hits)]
        self._release(len(self.held))
        self.finish_reason = FINISH_STOP
        return True

    def _release(self, count: int) -> None:
        if count <= 0:
            return
        released, self.held = self.held[:count], self.held[count:]
        self.text += released
        self.unread += released


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
