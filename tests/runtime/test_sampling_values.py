"""The value-order lemmas: the rule's arrays come from sorted values alone, and ids come back.

- p = exp_probs(z - z_max) never grows as z falls, so p in rank order is p sorted descending;
- top_values / top_ids are the values / ids of the first ranks of the stable order;
- rank_order is the stable descending order; token_at_value, position_at_prob and
  last_position find the id at a rank;
- draw_rank (one cumsum) is the oracle's two-cumsum top-p and inverse CDF.
"""

from __future__ import annotations

import numpy as np
import pytest

from cellspec.runtime.sampling_values import (
    draw_rank,
    exp_probs,
    last_position,
    position_at_prob,
    rank_order,
    token_at_value,
    top_ids,
    top_values,
)
from tests.runtime.test_sampling import KINDS, make_logits

STARTS = (-2.0**-40, -1e-7, -2.0**-24, -1e-3, -0.5, -1.0, -19.5, -87.0, -103.9, -104.5)


@pytest.mark.parametrize("start", STARTS)
def test_exp_probs_never_grows_as_the_shift_falls(start):
    """2**20 consecutive float32 going down from `start`, and the stretch from 0 down to it."""
    first = int(np.float32(start).view(np.uint32))
    run = np.arange(first, first + (1 << 20), dtype=np.uint32).view(np.float32)
    for shifted in (run, -np.geomspace(1e-45, -start, 1 << 16).astype(np.float32)):
        shifted = np.sort(shifted)[::-1]
        assert np.all(np.diff(exp_probs(shifted)) <= 0)
    assert exp_probs(np.float32([0.0, -0.0]))[0] == exp_probs(np.float32([-0.0]))[0] == 1


def stable_order(values: np.ndarray) -> np.ndarray:
    return np.argsort(-values, kind="stable")


@pytest.mark.parametrize("kind", KINDS)
def test_rank_order_is_the_stable_descending_order(kind):
    rng = np.random.default_rng(len(kind))
    for vocab in (1, 2, 50, 4000):
        values = make_logits(kind, vocab, rng)
        values[rng.random(vocab) < 0.05] = rng.choice([-np.inf, 1e-45, -1e-45, 3e38])
        assert rank_order(values).tolist() == stable_order(values).tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_top_values_and_ids_are_the_first_ranks(kind):
    rng = np.random.default_rng(len(kind) + 1)
    values = make_logits(kind, 3000, rng)
    order = stable_order(values)
    for count in (1, 2, 7, 1499, 2999, 3000):
        top = top_values(values, count)
        assert top.flags.c_contiguous
        assert np.array_equal(top, values[order[:count]])  # -0.0 == 0.0: signs may differ
        assert top_ids(values, count).tolist() == np.sort(order[:count]).tolist()


@pytest.mark.parametrize("layout", ["normal", "high off the sample", "high on the sample",
                                    "ties"])
def test_top_values_and_ids_hold_whatever_the_strided_sample_sees(layout):
    """top_values / top_ids pick their candidates above a threshold guessed from every 48th
    value of a 49,152-token row: when the sample sees only low values (all are candidates),
    when it sees all the high ones and too few (back to the whole row), and through ties."""
    rng = np.random.default_rng(7)
    vocab = 49152
    values = (3 * rng.standard_normal(vocab)).astype(np.float32)
    on_sample = np.arange(vocab) % (vocab // 1024) == 0
    if layout == "high off the sample":
        values[on_sample] = -30
    elif layout == "high on the sample":
        values[~on_sample] = rng.standard_normal(np.count_nonzero(~on_sample)) - 30
        values[on_sample] = 10 + rng.random(np.count_nonzero(on_sample)).astype(np.float32)
    elif layout == "ties":
        values = np.round(values).astype(np.float32)
    order = stable_order(values)
    for count in (1, 50, 1024, 1100, 3000, 4096):
        assert np.array_equal(top_values(values, count), values[order[:count]])
        assert top_ids(values, count).tolist() == np.sort(order[:count]).tolist()


@pytest.mark.parametrize("kind", KINDS)
def test_ids_come_back_from_values(kind):
    rng = np.random.default_rng(len(kind) + 2)
    values = make_logits(kind, 2000, rng)
    order = stable_order(values)
    probs = exp_probs(values - values[order[0]])
    for rank in (0, 1, 2, 999, 1998, 1999):
        assert token_at_value(values, values[order[rank]], rank) == order[rank]
        assert position_at_prob(values, probs, probs[order[rank]], rank) == order[rank]
    assert last_position(values) == order[-1]


def oracle_rank(probs: np.ndarray, top_p: float, uniform: float) -> int:
    exclusive = np.cumsum(probs, dtype=np.float32) - probs
    keep = exclusive < np.float32(top_p)
    keep[0] = True
    kept = probs[keep]
    cdf = np.cumsum(kept, dtype=np.float32)
    index = int(np.searchsorted(cdf, np.float32(uniform) * cdf[-1], side="right"))
    return min(index, kept.size - 1)


def test_draw_rank_is_the_oracle():
    rng = np.random.default_rng(31)
    for i in range(600):
        values = make_logits(KINDS[i % len(KINDS)], int(rng.choice([1, 3, 100, 2000])), rng)
        probs = np.sort(exp_probs(values - values.max()))[::-1].copy()
        probs /= np.float32(probs.sum(dtype=np.float64))
        exclusive = np.cumsum(probs, dtype=np.float32) - probs
        top_ps = [0.0, 0.5, 0.9, 1.0, 2.0, float(exclusive[rng.integers(probs.size)])]
        for top_p in top_ps:
            for uniform in (0.0, float(rng.random()), 1 - 2**-24, 1.0):
                assert draw_rank(probs, top_p, uniform) == oracle_rank(probs, top_p, uniform)
