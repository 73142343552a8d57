"""How the token of each logits row is drawn, so that a backend can draw where the logits are.

A step asks for logits rows; `Draws` says, per row, the sampling parameters and the row's
uniform (one uniform per position: `positional_uniform(seed, position of the drawn token)`). On
the CPU the rows are drawn on the host with `sample_token`; a device backend runs the
artifact's sampler graph on its own logits and returns only the tokens. Both follow the one rule
of cellspec.runtime.sampling, bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cellspec.runtime.sampling import sample_tokens

DRAWN = "drawn"  # the backend output holding the drawn tokens [R] int64 (not a graph output)


@dataclass(frozen=True)
class Draws:
    """Per logits row [R]: temperature (0 = greedy), top_p, top_k (0 = off), uniform."""

    temperature: np.ndarray  # float32 [R]
    top_p: np.ndarray  # float32 [R]
    top_k: np.ndarray  # int64 [R]
    uniform: np.ndarray  # float32 [R], 0 for greedy rows

    @property
    def num_rows(self) -> int:
        return self.temperature.size

    @property
    def is_greedy(self) -> bool:
        return not np.count_nonzero(self.temperature)  # (every temperature 0; NaN is not 0)

    def take(self, rows: np.ndarray) -> Draws:
        return Draws(self.temperature[rows], self.top_p[rows], self.top_k[rows],
                     self.uniform[rows])

    def params(self) -> np.ndarray:
        """The sample graph's params [R, 4] float32: temperature, top_p, top_k, uniform."""
        return np.stack([self.temperature, self.top_p, self.top_k.astype(np.float32),
                         self.uniform], axis=1).astype(np.float32)

    @classmethod
    def concat(cls, parts: list[Draws]) -> Draws:
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("temperature", "top_p", "top_k", "uniform")))


@lru_cache(maxsize=64)
def greedy_draws(count: int) -> Draws:
    """`count` greedy rows (shared, so read-only)."""
    draws = make_draws([(0.0, 1.0, 0, 0.0)] * count)
    for column in (draws.temperature, draws.top_p, draws.top_k, draws.uniform):
        column.flags.writeable = False
    return draws


def make_draws(rows: list[tuple[float, float, int, float]]) -> Draws:
    """Draws from (temperature, top_p, top_k, uniform) per row."""
    columns = list(zip(*rows)) if rows else [(), (), (), ()]
    return Draws(np.asarray(columns[0], np.float32), np.asarray(columns[1], np.float32),
                 np.asarray(columns[2], np.int64), np.asarray(columns[3], np.float32))


def draw_on_host(logits: np.ndarray, draws: Draws) -> np.ndarray:
    """logits [R, V] -> tokens [R] int64 by the sampling rule."""
    return sample_tokens(logits, draws.temperature, draws.top_p, draws.top_k, draws.uniform)
