"""The sampling rule evaluated on values in rank order, and the token at a drawn rank.

Until its very last step the rule (cellspec.runtime.sampling) reads only values in rank order:
the kept z sorted descending, p = float32(exp(float64(z - z_max))), their float64 sum, float32
cumulative sums. Sorting the values alone (np.sort, no argsort) gives the same arrays bit for
bit, provided they are laid out the same: numpy's float64 sum of a float32 array depends on its
length, order and strides, so every array summed here is a fresh contiguous copy, as the rule's
own. Then only the token at the drawn rank r needs an id: the ranks that hold one value are
consecutive, ordered by id, and start after the count of larger values.

p is non-increasing in rank: z - z_max is rounded monotonically, and numpy's float64 exp (error
well under 4 ulp) can only invert two float32 inputs a > b closer than its error, which for
float32 happens only within 2**-27 of 0, where both round to float32 1.0. So p in rank order is
p sorted descending, whatever the ids.
"""

from __future__ import annotations

import numpy as np

_ID_BITS = 32
_ID_MASK = (1 << _ID_BITS) - 1


def exp_probs(shifted: np.ndarray) -> np.ndarray:
    """shifted: [n] float32 z - z_max -> float32(exp(float64(shifted))), as the rule computes."""
    wide = shifted.astype(np.float64)
    np.exp(wide, out=wide)
    return wide.astype(np.float32)


def draw_rank(probs: np.ndarray, top_p: float, uniform: float) -> int:
    """probs: [m] float32, normalised, in rank order -> the drawn rank (the rule's top-p filter and
    inverse CDF). The exclusive sums are non-decreasing (cumsum grows, p shrinks), so the kept
    ranks are a prefix, and their cdf is a prefix of the one sequential cumsum."""
    cumsum = np.cumsum(probs, dtype=np.float32)
    keep = cumsum - probs < np.float32(top_p)
    keep[0] = True
    kept = keep.size if keep.all() else int(np.argmin(keep))
    cdf = cumsum[:kept]
    index = int(np.searchsorted(cdf, np.float32(uniform) * cdf[-1], side="right"))
    return min(index, kept - 1)


def draw_sorted(scaled: np.ndarray, top_p: float, top_k: int, uniform: float) -> int:
    """The rule on the full stable order, as first written: for rows with NaN or +inf, whose
    arithmetic the value paths do not model."""
    order = np.argsort(-scaled, kind="stable")  # descending, ties by lower id
    if 0 < top_k < order.size:
        order = order[:top_k]
    kept = scaled[order]
    probs = np.exp((kept - kept[0]).astype(np.float64)).astype(np.float32)
    probs /= np.float32(probs.sum(dtype=np.float64))
    exclusive = np.cumsum(probs, dtype=np.float32) - probs
    keep = exclusive < np.float32(top_p)
    keep[0] = True
    probs = probs[keep]
    cdf = np.cumsum(probs, dtype=np.float32)
    index = int(np.searchsorted(cdf, np.float32(uniform) * cdf[-1], side="right"))
    return int(order[min(index, probs.size - 1)])


def largest(scaled: np.ndarray, count: int) -> np.ndarray:
    """Values of scaled [V] that hold its `count` largest (count < V), in no order: those at or
    above a threshold that a strided sample of 1,024 or so puts at about twice `count` values
    (checked to hold at least `count`), else all. np.partition of a whole row took 250-650 us
    at V = 49,152-151,936 on the CPU, one comparison over it 10-40 us (bench/NOTES.md,
    2026-12-02, fifth sitting)."""
    step = scaled.size // 1024
    if step < 2:
        return scaled
    sample = scaled[::step]
    rank = min(sample.size - 1, 2 * (count // step) + 16)  # about 2 count values above it
    threshold = np.partition(sample, sample.size - 1 - rank)[sample.size - 1 - rank]
    above = scaled[scaled >= threshold]  # no NaN here: draw_token sorts such rows whole
    return above if above.size >= count else scaled


def top_unordered(scaled: np.ndarray, count: int) -> np.ndarray:
    """The `count` largest values of scaled [V] (count < V), in no order."""
    pool = largest(scaled, count)
    return np.partition(pool, pool.size - count)[pool.size - count:]


def top_values(scaled: np.ndarray, count: int) -> np.ndarray:
    """The `count` largest values of scaled [V], descending and contiguous: scaled[order[:count]]
    up to the sign of zeros, which no later step can see (exp(+-0) = 1, x -+ 0 = x)."""
    if count < scaled.size:
        scaled = top_unordered(scaled, count)
    return np.sort(scaled)[::-1].copy()


def token_at_value(scaled: np.ndarray, value: np.float32, rank: int) -> int:
    """The id at `rank` of the order, given that rank holds `value` (no NaN in scaled)."""
    first_rank = int(np.count_nonzero(scaled > value))
    return int(np.flatnonzero(scaled == value)[rank - first_rank])


def draw_top_values(scaled: np.ndarray, first: int, count: int, top_p: float,
                    uniform: float) -> int:
    """The rule on the `count` kept ranks, from their values (no NaN or +inf in scaled)."""
    values = top_values(scaled, count)
    probs = exp_probs(values - scaled[first])
    probs /= np.float32(probs.sum(dtype=np.float64))
    rank = draw_rank(probs, top_p, uniform)
    return token_at_value(scaled, values[rank], rank)


def rank_order(values: np.ndarray) -> np.ndarray:
    """values: [b] float32 (no NaN) of ids in ascending order -> their positions in the vocabulary
    order: values descending, ties by position. One int64 sort of (ordinal of -value, position);
    the keys are distinct, so no stable sort is needed."""
    bits = (values + np.float32(0.0)).view(np.int32).astype(np.int64)  # -0.0 -> +0.0: they tie
    ordinal = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # integer order == float order
    keys = (-ordinal << _ID_BITS) | np.arange(values.size, dtype=np.int64)
    keys.sort()
    return keys & _ID_MASK


def position_at_prob(z: np.ndarray, probs: np.ndarray, value: np.float32, rank: int) -> int:
    """The position (into z, in id order) of `rank` of the order, given that rank's p is `value`;
    probs [n] holds every p >= value exactly. Equal p can hold several z: order them."""
    first_rank = int(np.count_nonzero(probs > value))
    block = np.flatnonzero(probs == value)
    return int(block[rank_order(z[block])[rank - first_rank]])


def last_position(z: np.ndarray) -> int:
    """The position of the last rank of the order of z: the highest id among the minimal z."""
    return int(np.flatnonzero(z == z.min())[-1])


def draw_all_probs(z: np.ndarray, probs: np.ndarray, top_p: float, uniform: float) -> int:
    """z [n] (ids ascending, no NaN) and their exact p [n] -> the drawn position, sorting p alone:
    the sum over p descending is the rule's sum bit for bit (same values, order and layout)."""
    values = np.sort(probs)[::-1].copy()
    rank = draw_rank(values / np.float32(values.sum(dtype=np.float64)), top_p, uniform)
    return position_at_prob(z, probs, values[rank], rank)


def top_ids(scaled: np.ndarray, count: int) -> np.ndarray:
    """The ids of the first `count` ranks, ascending: all above the count-th largest value, then
    the lowest ids among those equal to it."""
    kth = top_unordered(scaled, count).min()  # the count-th largest
    above = np.flatnonzero(scaled > kth)
    ties = np.flatnonzero(scaled == kth)[: count - above.size]
    return np.sort(np.concatenate([above, ties]))
