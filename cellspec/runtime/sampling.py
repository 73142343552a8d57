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

from cellspec.runtime.sampling_head import draw_large
from cellspec.runtime.sampling_values import draw_sorted, draw_top_values

_MASK64 = (1 << 64) - 1
_EXACT_MAX = 4096  # kept sets up to this many ranks: partition and sort their values


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
    """logits: [V] float32 -> one token id by the rule in the module docstring.

    Bit for bit the rule computed on the full stable order of the vocabulary, without that sort:
    from the sorted values of small top-k sets, else from the head of the order that decides the
    draw (cellspec.runtime.sampling_values and sampling_head say why each step is exact)."""
    if temperature == 0.0:
        return argmax_token(logits)
    scaled = np.asarray(logits, np.float32) / np.float32(temperature)
    return draw_token(scaled, top_p, top_k, uniform)


def sample_tokens(logits: np.ndarray, temperature: float | np.ndarray, top_p: float | np.ndarray,
                  top_k: int | np.ndarray, uniforms: float | np.ndarray) -> np.ndarray:
    """logits: [R, V]; temperature, top_p, top_k, uniforms: scalars or [R] -> tokens [R] int64,
    row i as sample_token(logits[i], temperature[i], top_p[i], top_k[i], uniforms[i]). Greedy
    rows take one argmax together; the others are drawn one by one (a row's cost is O(V) numpy
    work whose few calls batching would not save)."""
    logits = np.asarray(logits)
    rows = logits.shape[0]
    temperature, top_p, top_k, uniforms = (np.broadcast_to(x, (rows,))
                                           for x in (temperature, top_p, top_k, uniforms))
    tokens = np.empty(rows, np.int64)
    greedy = temperature == 0.0
    if greedy.any():
        tokens[greedy] = np.argmax(logits[greedy], axis=1)
    for i in np.flatnonzero(~greedy):
        tokens[i] = sample_token(logits[i], temperature[i], top_p[i], int(top_k[i]), uniforms[i])
    return tokens


def draw_token(scaled: np.ndarray, top_p: float, top_k: int, uniform: float, *,
               exact_max: int = _EXACT_MAX) -> int:
    """scaled: [V] float32 logits / temperature -> the token. Kept sets of up to `exact_max`
    ranks are sorted whole (by value); larger ones go through the head."""
    first = int(np.argmax(scaled))  # rank 0 (np.argmax takes a NaN as the maximum)
    if not np.isfinite(scaled[first]):  # NaN, +inf, or every logit -inf
        return draw_sorted(scaled, top_p, top_k, uniform)
    count = top_k if 0 < top_k < scaled.size else scaled.size
    if count <= exact_max:
        return draw_top_values(scaled, first, count, top_p, uniform)
    return draw_large(scaled, first, count, top_p, uniform)


def accept_count(proposals: np.ndarray, targets: np.ndarray) -> int:
    """The speculative acceptance rule: proposals d1..dn are accepted while each equals the
    target's draw at its position (targets[j] is the target token after the j-th prefix)."""
    mismatch = np.flatnonzero(np.asarray(proposals) != np.asarray(targets)[: len(proposals)])
    return int(mismatch[0]) if mismatch.size else len(proposals)
