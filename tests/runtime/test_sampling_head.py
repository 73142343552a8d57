"""The lemmas the head's exactness rests on, each checked against exact arithmetic or the rule.

- float32 exp is within EXP32_ERROR of the rule's p for every float32 below SIGNIFICANT;
- sum_error bounds a float64 sum of non-negative terms in any order;
- certified_total is the rule's ranked total whenever it answers, and refuses near a tie;
- decide, whenever it answers, gives the rule's rank on the full array.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from cellspec.runtime.sampling import draw_token
from cellspec.runtime.sampling_head import (
    EXP32_ERROR,
    LAST,
    SIGNIFICANT,
    Tail,
    approx_probs,
    certified_total,
    decide,
    sum_error,
)
from cellspec.runtime.sampling_values import exp_probs
from tests.runtime.test_sampling import make_logits, reference_sample_token


def float32_range(low: float, high: float, chunk: int = 1 << 21):
    """Every float32 in [low, high] (both <= 0), in chunks."""
    first = int(np.float32(high).view(np.uint32))  # negative floats: bits grow with magnitude
    last = int(np.float32(low).view(np.uint32))
    for start in range(first, last + 1, chunk):
        yield np.arange(start, min(start + chunk, last + 1), dtype=np.uint32).view(np.float32)


def test_float32_exp_is_within_its_bound_below_significant():
    """Every float32 in [-128, SIGNIFICANT): |exp32 - p| <= EXP32_ERROR * exp32 + 2**-126.
    Below -128 both round to 0 (p underflows at -103.97), checked on a sample."""
    worst = 0.0
    for shifted in float32_range(-128.0, float(np.nextafter(SIGNIFICANT, np.float32(-1)))):
        approx = np.exp(shifted).astype(np.float64)
        exact = exp_probs(shifted).astype(np.float64)
        excess = np.abs(approx - exact) - EXP32_ERROR * approx
        assert excess.max() <= 2.0**-126
        normal = exact >= 2.0**-126
        if normal.any():
            worst = max(worst, float((np.abs(approx - exact)[normal] / exact[normal]).max()))
    assert worst < EXP32_ERROR / 8  # the docstring's 2**-21.9: a 15x margin
    far = -np.geomspace(128.0, 3e38, 10000).astype(np.float32)
    assert not np.exp(np.r_[far, -np.inf]).any() and not exp_probs(far).any()


@pytest.mark.parametrize("n", [1, 2, 9, 130, 10_000, 200_000])
def test_sum_error_bounds_every_order(n):
    rng = np.random.default_rng(n)
    probs = np.exp(rng.normal(size=n) * 6 - 6).astype(np.float32)  # spans many binades
    exact = math.fsum(probs.astype(np.float64))
    for values in (np.sort(probs), np.sort(probs)[::-1].copy(), rng.permutation(probs)):
        assert abs(float(values.sum(dtype=np.float64)) - exact) <= sum_error(n) * exact
        sequential = np.cumsum(values, dtype=np.float64)[-1]
        assert abs(float(sequential) - exact) <= sum_error(n) * exact


def ranked_total(probs: np.ndarray) -> np.float32:
    """The rule's total: the float64 sum of p in rank order (descending), as a float32."""
    return np.float32(np.sort(probs)[::-1].copy().sum(dtype=np.float64))


def test_certified_total_is_the_ranked_total():
    rng = np.random.default_rng(21)
    refused = 0
    for i in range(1500):
        n = int(rng.choice([10, 1000, 49152]))
        logits = make_logits(("normal3", "peaked", "integers", "nearly_flat")[i % 4], n, rng)
        probs = exp_probs(logits - logits.max())
        total = certified_total(float(probs.sum(dtype=np.float64)), n, 0.0)
        refused += total is None
        assert total is None or total == ranked_total(probs)
    assert refused < 15  # about 1 in 300 at the largest n


def test_certified_total_refuses_a_float32_tie():
    """p = 1 and ~2**-24: the sum sits on the float32 midpoint 1 + 2**-24 (padding zeros widen
    the window, as a large vocabulary does), where the summation order could decide."""
    probs = np.zeros(100_000, np.float32)
    probs[0], probs[1] = 1.0, exp_probs(np.float32([-24 * math.log(2)]))[0]
    assert certified_total(float(probs.sum(dtype=np.float64)), probs.size, 0.0) is None
    probs[1] = 2.0**-30  # far from any midpoint
    assert certified_total(float(probs.sum(dtype=np.float64)), probs.size, 0.0) == 1.0


def test_a_refused_total_still_draws_the_rule():
    logits = np.full(3000, -np.inf, np.float32)
    logits[5], logits[9] = 0.0, np.float32(-24 * math.log(2))
    probs = exp_probs(logits - logits.max())
    assert certified_total(float(probs.sum(dtype=np.float64)), probs.size, 0.0) is None
    for uniform in (0.0, 0.5, 1 - 2.0**-23, 1 - 2.0**-24, 1.0):
        expected = reference_sample_token(logits, 1.0, 1.0, 0, uniform)
        assert draw_token(logits, 1.0, 0, uniform, exact_max=0) == expected


@pytest.mark.parametrize("kind", ["peaked", "normal8"])
def test_approx_probs_bounds_the_true_sum(kind):
    rng = np.random.default_rng(22)
    scaled = make_logits(kind, 49152, rng) / np.float32(0.5)  # most tokens far below the top
    shifted = scaled - scaled.max()
    probs, is_exact, spread = approx_probs(shifted)
    exact = exp_probs(shifted)
    assert not is_exact and spread > 0
    significant = shifted >= SIGNIFICANT
    assert np.array_equal(probs[significant], exact[significant])
    assert probs[~significant].max() < 2.0**-28  # never in a head
    true_sum = math.fsum(exact.astype(np.float64))
    assert abs(math.fsum(probs.astype(np.float64)) - true_sum) <= spread


def rule_rank(q: np.ndarray, top_p: float, uniform: float) -> int:
    """The rule's rank on the full array q, written as the oracle computes it."""
    exclusive = np.cumsum(q, dtype=np.float32) - q
    keep = exclusive < np.float32(top_p)
    keep[0] = True
    cdf = np.cumsum(q[keep], dtype=np.float32)
    index = int(np.searchsorted(cdf, np.float32(uniform) * cdf[-1], side="right"))
    return min(index, int(keep.sum()) - 1)


def exact_tail(q: np.ndarray, h: int) -> Tail:
    rest = math.fsum(q[h:].astype(np.float64))
    return Tail(q.size - h, q[h], rest * (1 - 1e-12), rest * (1 + 1e-12))


def test_decide_agrees_with_the_rule_whenever_it_answers():
    rng = np.random.default_rng(23)
    answers, seen = 0, set()
    for i in range(200):
        kind = ("peaked", "normal3", "integers", "nearly_flat", "two_level")[i % 5]
        logits = make_logits(kind, int(rng.choice([50, 700, 2000])), rng)
        probs = np.sort(exp_probs(logits - logits.max()))[::-1].copy()
        q = probs / np.float32(probs.sum(dtype=np.float64))
        cumsum = np.cumsum(q, dtype=np.float32)
        for h in sorted({1, 2, 5, q.size // 10, q.size // 2, q.size - 1} - {0}):
            edge = cumsum[h - 1]  # top_p here: is rank h kept? only rounding says
            edges = (edge, np.nextafter(edge, np.float32(2)), np.nextafter(edge, np.float32(0)))
            for top_p in (0.0, 0.5, 0.9, 0.99, 1.0, 2.0, *map(float, edges)):
                uniform = float(rng.choice([0.0, rng.random(), 1 - 2**-24, 1.0]))
                rank = decide(q[:h], exact_tail(q, h), top_p, uniform)
                if rank is None:
                    continue
                answers += 1
                seen.add("last" if rank == LAST else "rank")
                assert (q.size - 1 if rank == LAST else rank) == rule_rank(q, top_p, uniform)
    assert answers > 3000 and seen == {"last", "rank"}
