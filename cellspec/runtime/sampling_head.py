"""The sampling rule decided on the head of the vocabulary order, bit for bit, without sorting it.

Beyond its first h ranks the rule (cellspec.runtime.sampling) reads three things; each is
bounded from unordered data, and the head decides only when the bounds leave one answer:

1. The total: float32 of the float64 sum of all kept p, in rank order. Any float64 summation
   order of n non-negative terms errs by at most gamma_n = n u / (1 - n u), u = 2**-53, relative
   (Higham, Accuracy and Stability, 4.2). The sum is taken in id order; if float32 rounding is
   constant on the interval that then holds the ranked sum, that is the total. Otherwise (1 in
   2,400 rows of normal logits at V = 49,152) all p are sorted (sampling_values.draw_all_probs).
2. Which ranks top-p keeps: the exclusive sums are non-decreasing (the cumulative sums grow and
   p shrinks with rank), so the kept ranks are a prefix, and a tail rank j satisfies
   exclusive_j >= float32(c_end - q_max) with c_end the head's last cumulative sum and q_max
   a bound on every tail q.
3. The cumulative sum at the last kept rank, which scales u. Each float32 step c + q errs by at
   most min(q, half an ulp), so the tail moves c_end by the tail's mass, give or take that; when
   q_max is below half the gap under c_end no step moves it at all.

p of tokens more than 19.5 below the maximum is never in a head; when they are most of the row
their p comes from float32 exp, whose bounded error enters the bounds above (`approx_probs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cellspec.runtime.sampling_values import (
    draw_all_probs,
    draw_rank,
    exp_probs,
    last_position,
    position_at_prob,
    top_ids,
)

LAST = -1  # `decide`: the draw is the order's last rank
_LEVELS = (28, 25, 22, 19, 16, 13)  # candidate heads: p >= total * 2**-k, the deepest fitting
_MAX_HEAD_SHARE = 4  # a head over n / 4 ranks costs more than sorting all of p
_ROUNDING = 2.0**-50  # relative slack for the float64 arithmetic of the bounds themselves
# p below exp(-19.5) < 2**-28 <= total * 2**-k for every level: never in a head, so only their
# sum matters and numpy's float32 exp serves (2-4x cheaper than float64 on this CPU). Its
# error against the exact p is 2**-21.9 at most over every float32 input below SIGNIFICANT
# (tests/runtime/test_sampling_head.py checks them all); the bound leaves a 15x margin.
SIGNIFICANT = np.float32(-19.5)
EXP32_ERROR = 2.0**-18


@dataclass(frozen=True)
class Tail:
    """What bounds ranks h..n-1 of the order without ordering them."""

    count: int  # n - h
    q_max: np.float32  # >= every tail q
    q_sum_lo: float  # bounds on the sum of the tail's q
    q_sum_hi: float


def sum_error(n: int) -> float:
    """gamma_{n+1}, with room: a relative bound for a float64 sum of n non-negative terms in any
    order (numpy may add an initial 0)."""
    return 1.01 * (n + 1) * 2.0**-53 / (1 - (n + 1) * 2.0**-53)


def approx_probs(shifted: np.ndarray) -> tuple[np.ndarray, bool, float]:
    """shifted: [n] float32 z - z_max -> (p [n], is_exact, spread). p is exact where it can
    reach a head (shifted >= SIGNIFICANT); below, when such tokens are most of the row, it is
    numpy's float32 exp, within EXP32_ERROR relative (+ 2**-126) of the exact p: the true sum of
    p then lies within `spread` of the sum of these."""
    significant = shifted >= SIGNIFICANT
    if np.count_nonzero(significant) > shifted.size // _MAX_HEAD_SHARE:
        return exp_probs(shifted), True, 0.0
    probs = np.exp(shifted)
    significant = np.flatnonzero(significant)
    exact = exp_probs(shifted[significant])
    probs[significant] = exact
    # the float32 exp part's mass, bounded above: both sums err by sum_error, the difference
    # may cancel
    all_sum, exact_sum = float(probs.sum(dtype=np.float64)), float(exact.sum(dtype=np.float64))
    rest = all_sum - exact_sum + 3 * sum_error(shifted.size) * (all_sum + exact_sum)
    return probs, False, EXP32_ERROR * rest + shifted.size * 2.0**-125


def certified_total(total_sum: float, n: int, spread: float) -> np.float32 | None:
    """float32 of the rule's float64 sum over n p in rank order, or None when the order could
    matter. total_sum: a float64 sum of the p in any order, within `spread` of the exact p."""
    g = sum_error(n)
    lo = (total_sum / (1 + g) - spread) * (1 - g) * (1 - _ROUNDING)
    hi = (total_sum / (1 - g) + spread) * (1 + g) * (1 + _ROUNDING)
    low, high = np.float32(lo), np.float32(hi)
    return low if low == high else None


def decide(q: np.ndarray, tail: Tail, top_p: float, uniform: float) -> int | None:
    """q: [h] float32 normalised p of the first h ranks -> the drawn rank, LAST, or None when
    the head does not decide the draw."""
    top_p, uniform = np.float32(top_p), np.float32(uniform)
    cumsum = np.cumsum(q, dtype=np.float32)
    if tail.count == 0 or not (cumsum - q < top_p)[1:].all():
        return draw_rank(q, top_p, uniform)  # the kept prefix ends inside the head
    end = cumsum[-1]
    if not np.float32(end - tail.q_max) < top_p:
        return draw_rank(q, top_p, uniform)  # no tail rank is kept
    if tail.q_max < (end - np.nextafter(end, np.float32(0))) * np.float32(0.5):
        # no tail step moves the cumsum off `end`, and end < top_p: every tail rank is kept
        threshold = uniform * end
        return int(np.searchsorted(cumsum, threshold, side="right")) if threshold < end else LAST
    return _decide_bounded(cumsum, tail, top_p, uniform)


def _decide_bounded(cumsum: np.ndarray, tail: Tail, top_p: np.float32,
                    uniform: np.float32) -> int | None:
    """The head's ranks are all kept and the tail's are unknown: the cdf's last value lies in
    [last_lo, end_hi]; the rank is decided if u times either end crosses the head's cumsum at
    the same rank."""
    start = float(cumsum[-1])
    ceiling = _f32_up((start + 2 * tail.q_sum_hi) * (1 + 2.0**-40))  # >= every tail cumsum
    half_ulp = float(np.spacing(ceiling)) / 2
    drift = min(tail.q_sum_hi, tail.count * half_ulp)  # total rounding of the tail's steps
    end_lo = max(start, start + tail.q_sum_lo - drift)
    end_hi = (start + tail.q_sum_hi + drift) * (1 + _ROUNDING)
    if end_hi < float(top_p):
        last_lo = end_lo  # every tail rank is kept
    else:  # the last kept rank m - 1 has c >= top_p - q_max - half_ulp unless m = n
        last_lo = max(start, min(end_lo, float(top_p) - float(tail.q_max) - half_ulp))
    ends = (uniform * _f32_down(last_lo * (1 - _ROUNDING)), uniform * _f32_up(end_hi))
    low, high = min(ends), max(ends)
    if not high < cumsum[-1]:  # also NaN
        return None
    ranks = np.searchsorted(cumsum, [low, high], side="right")
    return int(ranks[0]) if ranks[0] == ranks[1] else None


def _f32_up(x: float) -> np.float32:
    y = np.float32(x)
    return y if float(y) >= x else np.nextafter(y, np.float32(np.inf))


def _f32_down(x: float) -> np.float32:
    y = np.float32(x)
    return y if float(y) <= x else np.nextafter(y, np.float32(-np.inf))


def _tail(values: np.ndarray, masses: np.ndarray, h: int, tau: np.float32, total: np.float32,
          n: int, total_sum: float, spread: float) -> Tail:
    """values: [c] float32 every p >= tau, descending; masses: their float64 running sums; the
    head is the first h. total_sum: the float64 sum of all p, within `spread` of exact."""
    g, head_sum = sum_error(n), float(masses[h - 1])
    slack = _ROUNDING * (total_sum + head_sum) + spread
    p_lo = total_sum / (1 + g) - head_sum / (1 - g) - slack
    p_hi = total_sum / (1 - g) - head_sum / (1 + g) + slack
    count = n - h
    # q = float32(p / total): relative error 2**-24, absolute 2**-150 when subnormal
    q_sum_lo = max(0.0, p_lo / float(total) * (1 - 2.0**-22) - count * 2.0**-149)
    q_sum_hi = max(0.0, p_hi) / float(total) * (1 + 2.0**-22) + count * 2.0**-149
    next_p = values[h] if h < values.size else tau  # every later p is <= next_p
    return Tail(count, np.float32(next_p) / total, q_sum_lo, q_sum_hi)


def _shares(top_p: float, uniform: float) -> tuple[float, float]:
    """(needed, target): the share of the mass a head must hold to decide the draw at all, and
    the share a first head aims at (a heuristic: too small a head costs one more try)."""
    if np.float32(top_p) < 1:  # the top-p cut falls inside the head
        needed = max(float(top_p), 0.0)
        return needed, needed + 0.25 * (1 - needed)
    needed = min(max(float(uniform), 0.0), 1.0)  # u * cdf[-1] falls inside the head
    return needed, 1 - 0.125 * (1 - needed)


def draw_head(z: np.ndarray, probs: np.ndarray, total: np.float32, total_sum: float,
              spread: float, top_p: float, uniform: float) -> int | None:
    """z [n] (ids ascending), probs [n] from `approx_probs`, the certified total -> the drawn
    position into z, or None when no head of up to n / 4 ranks decides."""
    n = probs.size
    for k in _LEVELS:  # the deepest level that fits holds every shallower head as a prefix
        tau = total * np.float32(2.0**-k)
        in_head = probs >= tau  # a prefix of the order: p falls with rank
        count = np.count_nonzero(in_head)
        if count <= n // _MAX_HEAD_SHARE:
            break
    if not 0 < count <= n // _MAX_HEAD_SHARE:
        return None  # too flat for a head
    # exactly `count` p are >= tau: they are the top `count`. A mask, not np.partition: p below
    # the head are mostly tiny or 0, and partitioning their ties took 0.5 ms of a 0.6 ms row at
    # V = 49,152 (the mask 15-85 us; bench/NOTES.md, 2026-12-02, fifth sitting)
    selected = probs[in_head]
    needed, target = (share * total_sum for share in _shares(top_p, uniform))
    if k != _LEVELS[0] and selected.sum(dtype=np.float64) < needed:
        return None  # too flat for a head: sorting everything is cheaper than trying it
    values = np.sort(selected)[::-1]
    masses = np.cumsum(values, dtype=np.float64)
    h = min(int(np.searchsorted(masses, target)) + 1, values.size)
    while True:
        tail = _tail(values, masses, h, tau, total, n, total_sum, spread)
        rank = decide(values[:h] / total, tail, top_p, uniform)
        if rank == LAST:
            return last_position(z)
        if rank is not None:
            return position_at_prob(z, probs, values[rank], rank)
        if h == values.size:
            return None
        h = min(4 * h, values.size)


def draw_large(scaled: np.ndarray, first: int, count: int, top_p: float, uniform: float) -> int:
    """scaled [V] (no NaN or +inf), rank 0 at `first`, the first `count` ranks kept -> the token:
    from a head where that decides, else from all p sorted."""
    ids = None if count == scaled.size else top_ids(scaled, count)
    z = scaled if ids is None else scaled[ids]
    shifted = z - scaled[first]  # the rule's kept - kept[0], in id order
    probs, is_exact, spread = approx_probs(shifted)
    total_sum = float(probs.sum(dtype=np.float64))
    total = certified_total(total_sum, z.size, spread)
    if total is None and not is_exact:  # float32 exp's error was too wide: try exact p
        probs, is_exact, spread = exp_probs(shifted), True, 0.0
        total_sum = float(probs.sum(dtype=np.float64))
        total = certified_total(total_sum, z.size, spread)
    position = None
    if total is not None:
        position = draw_head(z, probs, total, total_sum, spread, top_p, uniform)
    if position is None:
        position = draw_all_probs(z, probs if is_exact else exp_probs(shifted), top_p, uniform)
    return position if ids is None else int(ids[position])
