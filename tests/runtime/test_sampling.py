"""The host sampler against the rule as first written (one full stable argsort), bit for bit.

`reference_sample_token` is the former body of sample_token, kept as the oracle. Every case
asserts the identical token. The head path is also forced on small vocabularies
(`exact_max=0`), where the oracle is cheap, so its every branch meets many rows; the fast path
itself is asserted to decide the rows it is built for.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cellspec.runtime import sampling_head
from cellspec.runtime.sampling import draw_token, sample_token, sample_tokens

TEMPERATURES = (0.1, 0.3, 0.7, 1.0, 1.3, 2.0)
TOP_PS = (0.1, 0.5, 0.9, 0.95, 0.99, 1.0)
KINDS = ("normal3", "normal8", "integers", "peaked", "flat", "nearly_flat", "neg_inf",
         "huge_range", "two_level", "signed_zeros", "tiny")


def reference_sample_token(logits: np.ndarray, temperature: float, top_p: float, top_k: int,
                           uniform: float) -> int:
    """sample_token as it was before the head: the rule on the full stable order."""
    if temperature == 0.0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float32) / np.float32(temperature)
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


def reference_sums(logits: np.ndarray, temperature: float, top_p: float,
                   top_k: int) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's exclusive sums over the kept ranks and its cdf over the top-p-kept ones."""
    scaled = logits.astype(np.float32) / np.float32(temperature)
    order = np.argsort(-scaled, kind="stable")
    if 0 < top_k < order.size:
        order = order[:top_k]
    kept = scaled[order]
    probs = np.exp((kept - kept[0]).astype(np.float64)).astype(np.float32)
    probs /= np.float32(probs.sum(dtype=np.float64))
    exclusive = np.cumsum(probs, dtype=np.float32) - probs
    keep = exclusive < np.float32(top_p)
    keep[0] = True
    return exclusive, np.cumsum(probs[keep], dtype=np.float32)


def make_logits(kind: str, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """[vocab] float32 logits of one shape of distribution."""
    normal = rng.standard_normal(vocab)
    if kind in ("normal3", "normal8"):
        logits = normal * float(kind[-1])
    elif kind == "integers":  # many exact ties
        logits = rng.integers(-3, 4, vocab).astype(np.float64)
    elif kind == "peaked":  # a confident model: one token far above the rest
        logits = normal * 2
        logits[rng.integers(vocab)] += 20
    elif kind == "flat":
        logits = np.zeros(vocab)
    elif kind == "nearly_flat":  # p differ in their last bits, or tie after rounding
        logits = 1 + normal * 1e-6
    elif kind == "neg_inf":
        logits = normal * 3
        logits[rng.random(vocab) < 0.3] = -np.inf
        logits[rng.integers(vocab)] = 1.0
    elif kind == "huge_range":
        logits = normal * 1e4
    elif kind == "two_level":
        logits = np.where(rng.random(vocab) < 0.5, 0.0, -5.0)
    elif kind == "signed_zeros":  # -0.0 and +0.0 tie, at the top
        logits = np.where(rng.random(vocab) < 0.5, -0.0, 0.0)
        logits[rng.random(vocab) < 0.5] = -1.5
    else:  # tiny
        logits = normal * 1e-3
    return logits.astype(np.float32)


def random_case(rng: np.random.Generator, vocab: int) -> tuple:
    kind = KINDS[rng.integers(len(KINDS))]
    top_k = int(rng.choice([0, 0, 1, 5, 50, 1000, vocab, vocab + 3, -1]))
    uniform = float(rng.choice([0.0, 1 - 2**-24, rng.integers(2**24) * 2.0**-24]))
    return (make_logits(kind, vocab, rng), float(rng.choice(TEMPERATURES)),
            float(rng.choice(TOP_PS)), top_k, uniform)


def assert_same_token(logits: np.ndarray, temperature: float, top_p: float, top_k: int,
                      uniform: float) -> None:
    expected = reference_sample_token(logits, temperature, top_p, top_k, uniform)
    case = (temperature, top_p, top_k, uniform)
    assert sample_token(logits, temperature, top_p, top_k, uniform) == expected, case
    scaled = logits.astype(np.float32) / np.float32(temperature)
    assert draw_token(scaled, top_p, top_k, uniform, exact_max=0) == expected, case


@pytest.mark.parametrize(("vocab", "count"), [(1, 20), (2, 300), (7, 600), (64, 1500),
                                              (1000, 600), (5000, 150)])
def test_random_rows_small_vocab(vocab, count):
    rng = np.random.default_rng(vocab)
    with np.errstate(over="ignore"):  # huge_range / 0.1 overflows to inf, as it did before
        for _ in range(count):
            assert_same_token(*random_case(rng, vocab))


@pytest.mark.parametrize(("vocab", "count"), [(49152, 120), (151936, 40)])
def test_random_rows_large_vocab(vocab, count):
    rng = np.random.default_rng(vocab)
    with np.errstate(over="ignore"):
        for _ in range(count):
            logits, temperature, top_p, top_k, uniform = random_case(rng, vocab)
            expected = reference_sample_token(logits, temperature, top_p, top_k, uniform)
            assert sample_token(logits, temperature, top_p, top_k, uniform) == expected


@pytest.mark.parametrize("vocab", [300, 49152])
@pytest.mark.parametrize("kind", ["normal3", "peaked", "integers", "nearly_flat"])
@pytest.mark.parametrize(("top_p", "top_k"), [(0.9, 0), (1.0, 0), (0.95, 50)])
def test_uniforms_at_cdf_boundaries(vocab, kind, top_p, top_k):
    """u on and one or two float32 steps around u * cdf[-1] == cdf[j]: where a draw moves."""
    rng = np.random.default_rng(vocab + len(kind))
    logits, temperature = make_logits(kind, vocab, rng), 0.8
    _, cdf = reference_sums(logits, temperature, top_p, top_k)
    ranks = sorted({0, 1, 2, cdf.size // 3, cdf.size // 2, cdf.size - 2, cdf.size - 1})
    for j in [r for r in ranks if 0 <= r < cdf.size]:
        center = np.float32(cdf[j] / cdf[-1])
        for u in _float32_neighbours(center, 2):
            if 0.0 <= u < 1.0:
                assert_same_token(logits, temperature, top_p, top_k, u)


@pytest.mark.parametrize("vocab", [300, 49152])
@pytest.mark.parametrize("kind", ["normal3", "integers", "nearly_flat"])
def test_top_p_at_exclusive_boundaries(vocab, kind):
    """top_p on and next to the exclusive sums: where the kept prefix ends."""
    rng = np.random.default_rng(vocab * 7 + len(kind))
    logits, temperature = make_logits(kind, vocab, rng), 1.0
    exclusive, _ = reference_sums(logits, temperature, 1.0, 0)
    for j in (1, 2, 5, exclusive.size // 4, exclusive.size // 2, exclusive.size - 1):
        for top_p in _float32_neighbours(exclusive[min(j, exclusive.size - 1)], 1):
            for uniform in (0.0, 0.37, 1 - 2**-24):
                assert_same_token(logits, temperature, top_p, 0, uniform)


def _float32_neighbours(center: np.float32, steps: int) -> list[float]:
    values, up, down = [float(center)], center, center
    for _ in range(steps):
        up, down = np.nextafter(up, np.float32(2)), np.nextafter(down, np.float32(-1))
        values += [float(up), float(down)]
    return values


@pytest.mark.parametrize("vocab", [64, 3000, 49152])
def test_odd_parameters(vocab):
    """u = 1 (the cdf's end: the last kept rank), top_p > 1 or <= 0, top_k past V or negative."""
    rng = np.random.default_rng(11)
    for kind in ("normal3", "peaked", "integers", "flat", "neg_inf"):
        logits = make_logits(kind, vocab, rng)
        for top_p, top_k, uniform in [(1.0, 0, 1.0), (2.0, 0, 0.5), (2.0, 0, 1.0), (0.0, 0, 0.9),
                                      (-1.0, 3, 0.5), (1.0, vocab + 1, 0.99), (0.9, -5, 0.2),
                                      (1.0, 1, 0.7), (2.0, 0, 0.999999)]:
            assert_same_token(logits, 1.0, top_p, top_k, uniform)


SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -np.inf, np.inf, np.nan, 1e-45, -3e38, 3e38])


@settings(max_examples=250, deadline=None, derandomize=True, database=None)
@given(logits=hnp.arrays(np.float32, st.integers(1, 40),
                         elements=st.floats(-50, 50, width=32) | st.integers(-2, 2) | SPECIAL),
       temperature=st.sampled_from(TEMPERATURES), top_p=st.sampled_from((*TOP_PS, 0.0, 2.0)),
       top_k=st.integers(-1, 45), uniform=st.floats(0, 1, width=32))
def test_arbitrary_small_rows(logits, temperature, top_p, top_k, uniform):
    with np.errstate(invalid="ignore", over="ignore"):
        assert_same_token(logits, temperature, top_p, top_k, uniform)


def test_last_rank_is_drawn_at_u_one():
    """u = 1 with every rank kept picks the order's last rank: the highest id among the lowest."""
    logits = np.array([0.0, -np.inf, 1.0, -np.inf, 0.5], np.float32)
    logits = np.tile(logits, 40)  # 200 tokens, -inf at ids 1, 3, 6, ..., the last at 198
    assert reference_sample_token(logits, 1.0, 2.0, 0, 1.0) == 198
    assert sample_token(logits, 1.0, 2.0, 0, 1.0) == 198
    assert draw_token(logits, 2.0, 0, 1.0, exact_max=0) == 198


def test_non_finite_rows_follow_the_old_arithmetic():
    rng = np.random.default_rng(12)
    rows = [np.full(50, -np.inf, np.float32), make_logits("normal3", 50, rng),
            make_logits("normal3", 50, rng), np.array([3e38, -3e38, 1.0], np.float32)]
    rows[1][7] = np.nan
    rows[2][[3, 9]] = np.inf
    with np.errstate(invalid="ignore", over="ignore"):
        for logits in rows:
            for temperature, top_p, top_k, uniform in [(1.0, 0.9, 0, 0.3), (0.1, 1.0, 2, 0.9),
                                                       (0.5, 0.5, 0, 0.0)]:
                assert_same_token(logits, temperature, top_p, top_k, uniform)


def test_ties_order_lower_id_first():
    """All equal: rank r is id r, so u = (r + 0.5) / V draws id r, head path or not."""
    vocab = 6000
    logits = np.zeros(vocab, np.float32)
    for r in (0, 1, 17, 2999, 5998, 5999):
        uniform = (r + 0.5) / vocab
        assert sample_token(logits, 1.0, 1.0, 0, uniform) == r
        assert draw_token(logits, 1.0, 0, uniform, exact_max=0) == r
        assert reference_sample_token(logits, 1.0, 1.0, 0, uniform) == r


def test_sample_tokens_rows_match():
    rng = np.random.default_rng(13)
    vocab, rows = 3000, 16
    logits = np.stack([make_logits(KINDS[i % len(KINDS)], vocab, rng) for i in range(rows)])
    temperature = np.where(np.arange(rows) % 4 == 0, 0.0, 0.9)
    top_p, top_k = rng.choice(TOP_PS, rows), rng.choice([0, 5, 100], rows)
    uniforms = rng.random(rows)
    tokens = sample_tokens(logits, temperature, top_p, top_k, uniforms)
    expected = [reference_sample_token(logits[i], temperature[i], top_p[i], int(top_k[i]),
                                       uniforms[i]) for i in range(rows)]
    assert tokens.dtype == np.int64
    assert tokens.tolist() == expected
    assert sample_tokens(logits, 0.0, 1.0, 0, 0.5).tolist() == np.argmax(logits, 1).tolist()


def test_the_head_decides_confident_rows(monkeypatch):
    """The point of the head: peaked rows never sort the vocabulary."""
    rng = np.random.default_rng(14)
    sorted_rows = []
    sort_all = sampling_head.draw_all_probs
    monkeypatch.setattr(sampling_head, "draw_all_probs",
                        lambda *args: sorted_rows.append(args) or sort_all(*args))
    for i in range(30):
        logits = make_logits("peaked", 49152, rng)
        assert_same_token(logits, 0.7, TOP_PS[i % len(TOP_PS)], 0, float(rng.random()))
    assert len(sorted_rows) <= 1  # a total too close to a float32 tie: about 1 row in 300
