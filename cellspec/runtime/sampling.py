"""Host sampling: one uniform per position, inverse CDF over the filtered distribution.

Every sampled token takes its uniform from `positional_uniform(seed, position)`, where `position`
is the position the drawn token will occupy. Plain and speculative decoding therefore draw the
same token at every position (DESIGN.md, "Determinism: one uniform per position").

The rule (the `sample` and `verify` graphs implement the same one in float32):
  z = logits / temperature; order the vocabulary by z descending (ties: lower id first);
  keep the first top_k (0 = all); p = softmax over the kept; keep rank j iff j == 0 or the
  exclusive cumulative sum of p before j is < top_p; renormalise; the token is the first kept
  rank whose inclusive cumulative sum exceeds u * total (the last kept rank if none does).
Temperature 0 is greedy: the lowest id among the maximal logits.
"""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1


def splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def positional_uniform(seed: int, position: int) -> float:
    """A uniform in [0, 1) on a 2**-24 grid, a pure function of (seed, position)."""
    mixed = splitmix64((seed & _MASK64) ^ splitmix64(position + 1))
    return float(mixed >> 40) * 2.0**-24


def argmax_token(logits: np.ndarray) -> int:
    """logits: [V]. np.argmax returns the first maximal index."""
    return int(np.argmax(logits))


def sample_token(
    logits: np.ndarray, temperature: float, top_p: float, top_k: int, uniform: float
) -> int:
    """logits: [V] float32 -> one token id by the rule in the module docstring."""
    if temperature == 0.0:
        return argmax_token(logits)
    scaled = logits.astype(np.float32) / np.float32(temperature)
    order = np.argsort(-scaled, kind="stable")  # descending, ties by lower id
    if 0 < top_k < order.size:
        order = order[:top_k]
    kept = scaled[order]
    # exp and its sum in float64, rounded to float32: the sample graph computes the same, so
    # host and graph draws agree bit for bit (float32 exp differs by an ulp across libraries)
    probs = np.exp((kept - kept[0]).astype(np.float64)).astype(np.float32)
    probs /= np.float32(probs.sum(dtype=np.float64))
    exclusive = np.cumsum(probs, dtype=np.float32) - probs
    keep = exclusive < np.float32(top_p)
    keep[0] = True
    probs = probs[keep]
    cdf = np.cumsum(probs, dtype=np.float32)
    index = int(np.searchsorted(cdf, np.float32(uniform) * cdf[-1], side="right"))
    return int(order[min(index, probs.size - 1)])


def accept_count(proposals: np.ndarray, targets: np.ndarray) -> int:
    """The speculative acceptance rule: proposals d1..dn are accepted while each equals the
    target's draw at its position (targets[j] is the target token after the j-th prefix)."""
    mismatch = np.flatnonzero(np.asarray(proposals) != np.asarray(targets)[: len(proposals)])
    return int(mismatch[0]) if mismatch.size else len(proposals)
