"""cellspec's sampling rule, batched in torch: one uniform per (seed, position), inverse CDF.

cellspec.runtime.sampling draws the token at position `pos` of a session seeded `seed` with
`u = positional_uniform(seed, pos)`: order the vocabulary by logit descending (ties: lower id
first), softmax of logits / T, the first rank whose inclusive cumulative sum exceeds u * total.
Temperature 0 is the argmax (lowest id among ties). Here top_p = 1 and top_k = 0 (cellspec's
defaults), for a batch of rows each with its own seed; the uniforms are computed with the same
splitmix64 in numpy uint64 (wrapping arithmetic is the 64-bit mask).
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(values: np.ndarray) -> np.ndarray:
    """cellspec.runtime.sampling.splitmix64 over a uint64 array."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def positional_uniforms(seeds: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """[n] seeds, [n] positions -> [n] float64 uniforms equal to cellspec's
    `positional_uniform(seed, position)` (a 2**-24 grid in [0, 1))."""
    seeds = np.asarray(seeds, dtype=np.int64).astype(np.uint64)
    mixed = splitmix64(seeds ^ splitmix64(np.asarray(positions, dtype=np.uint64) + np.uint64(1)))
    return (mixed >> np.uint64(40)).astype(np.float64) * 2.0**-24


def sample_rows(logits: torch.Tensor, temperature: float, uniforms: np.ndarray) -> torch.Tensor:
    """logits [n, V], uniforms [n] -> [n] token ids (int64) by cellspec's rule."""
    if temperature == 0.0:
        return torch.argmax(logits, dim=-1)
    scaled = logits.float() / temperature
    ordered, order = torch.sort(scaled, dim=-1, descending=True, stable=True)
    # exp and its sum in float64 rounded to float32, as cellspec computes them
    probs = torch.exp((ordered - ordered[:, :1]).double()).float()
    probs = probs / probs.double().sum(dim=-1, keepdim=True).float()
    cdf = torch.cumsum(probs, dim=-1)
    # keep rank j iff the exclusive cumulative sum before it is < top_p = 1: a prefix of ranks
    kept = ((cdf - probs) < 1.0).sum(dim=-1, keepdim=True).clamp(min=1)
    total = cdf.gather(1, kept - 1)
    u = torch.as_tensor(uniforms, dtype=torch.float32, device=logits.device)[:, None]
    index = torch.searchsorted(cdf, u * total, right=True)
    return order.gather(1, torch.minimum(index, kept - 1))[:, 0]
