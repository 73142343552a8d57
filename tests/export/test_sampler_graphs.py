"""The sampler and verifier graphs on ORT CPU against the host rule (cellspec.runtime.sampling).

Exact token equality throughout. Hand-built cases use dyadic probabilities and uniforms in the
middle of their CDF interval. Random rows are compared where the draw is stable: a row whose host
draw changes when u or top_p moves by `_MARGIN` sits on a float32 boundary (exp and sums may
round differently on ORT than in numpy) and is redrawn; the test checks such rows are rare.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from cellspec.export.sampler import (
    CANDIDATES,
    GRAPH_FILES,
    PARAMS,
    VERDICT,
    make_verify,
    write_sampler_graphs,
)
from cellspec.runtime.sampling import accept_count, sample_token

V = 64
_MARGIN = 1e-4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sampler")
    files = write_sampler_graphs(folder, V)
    assert files == GRAPH_FILES
    sessions = {name: ort.InferenceSession(str(folder / file),
                                           providers=["CPUExecutionProvider"])
                for name, file in files.items()}

    def call(name: str, **feeds: np.ndarray) -> np.ndarray:
        return sessions[name].run(None, feeds)[0]

    return call


def host_sample(logits: np.ndarray, params: np.ndarray) -> int:
    t, top_p, top_k, u = (float(x) for x in params)
    return sample_token(logits, np.float32(t), np.float32(top_p), int(top_k), np.float32(u))


def host_verdict(logits: np.ndarray, candidates: np.ndarray, params: np.ndarray) -> list[int]:
    """logits [W, V], candidates [W], params [3 + W] -> [accepted, next]."""
    targets = [host_sample(logits[j], np.r_[params[:3], params[3 + j]])
               for j in range(len(candidates))]
    accepted = accept_count(candidates[1:], np.array(targets))
    return [accepted, targets[accepted]]


def is_stable(logits: np.ndarray, params: np.ndarray) -> bool:
    """The host draw does not move when u or top_p moves by _MARGIN."""
    token = host_sample(logits, params)
    for column in (1, 3):
        for delta in (-_MARGIN, _MARGIN):
            moved = params.copy()
            moved[column] = np.clip(moved[column] + delta, 0.0, 1.0 - 2.0**-24)
            if column == 1 and params[1] in (0.0, 1.0):
                continue  # the rule's edges: top_p 0 keeps one, 1 keeps all
            if host_sample(logits, moved) != token:
                return False
    return True


def dyadic_logits(order: list[int]) -> np.ndarray:
    """Logits whose softmax gives order[0] 1/2, order[1] 1/4, ... (the rest share ~0)."""
    logits = np.full(V, -60.0, np.float32)
    for i, token in enumerate(order):
        logits[token] = -np.log(2.0) * (i + 1)
    return logits


def test_argmax_takes_the_first_maximum(run):
    rng = np.random.default_rng(1)
    logits = rng.integers(-2, 3, size=(200, V)).astype(np.float32)  # many ties
    logits[0] = 0.0
    tokens = run("argmax", logits=logits)
    assert tokens.dtype == np.int64
    assert tokens.tolist() == np.argmax(logits, axis=1).tolist()
    assert tokens[0] == 0


def test_sample_greedy_rows_are_argmax(run):
    rng = np.random.default_rng(2)
    logits = rng.integers(-3, 3, size=(50, V)).astype(np.float32)
    params = np.zeros((50, 4), np.float32)
    params[:, 1], params[:, 3] = 0.7, rng.random(50)
    params[:, 2] = rng.integers(0, 5, 50)
    assert run("sample", logits=logits, params=params).tolist() == \
        np.argmax(logits, axis=1).tolist()


@pytest.mark.parametrize("top_k", [0, 8, V, V + 5])
def test_sample_ties_order_lower_id_first(run, top_k):
    # all logits equal: every kept rank has mass exactly 1/kept, so u picks rank floor(u * kept)
    kept = V if top_k in (0, V, V + 5) else top_k
    uniforms = (np.arange(kept, dtype=np.float32) + 0.5) / kept
    logits = np.zeros((kept, V), np.float32)
    params = np.stack([np.ones(kept), np.ones(kept), np.full(kept, top_k), uniforms], 1)
    tokens = run("sample", logits=logits, params=params.astype(np.float32))
    assert tokens.tolist() == list(range(kept))
    assert tokens.tolist() == [host_sample(logits[i], params[i]) for i in range(kept)]


@pytest.mark.parametrize(("top_p", "top_k", "u", "expected"), [
    (1.0, 0, 0.30, 7),  # cdf 1/2, 3/4, 7/8, ...: u = 0.30 -> rank 0
    (1.0, 0, 0.60, 3),  # rank 1
    (1.0, 0, 0.80, 50),  # rank 2
    (1.0, 2, 0.80, 3),  # top_k 2: mass 3/4, threshold 0.6 -> rank 1
    (1.0, 1, 0.99, 7),  # top_k 1 keeps one
    (0.6, 0, 0.90, 3),  # top_p 0.6 keeps ranks with exclusive 0, 1/2 -> threshold 0.675 -> rank 1
    (0.5, 0, 0.90, 7),  # exclusive 1/2 is not < 1/2 -> only rank 0
    (0.0, 0, 0.90, 7),  # top_p 0 keeps one
    (0.8, 3, 0.95, 3),  # top_k 3 renormalises to 4/7, 2/7, 1/7; top_p drops rank 2 (6/7 >= 0.8)
    (0.9, 3, 0.95, 50),  # top_p 0.9 keeps all 3 ranks: cdf 4/7, 6/7, 1 -> rank 2
])
def test_sample_filters(run, top_p, top_k, u, expected):
    logits = dyadic_logits([7, 3, 50, 12, 0])
    params = np.array([[1.0, top_p, top_k, u]], np.float32)
    assert host_sample(logits, params[0]) == expected
    assert run("sample", logits=logits[None], params=params).tolist() == [expected]


def random_rows(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Random logits (some quantized to force ties) and params, each row stable (see is_stable)."""
    logits = np.empty((count, V), np.float32)
    params = np.empty((count, 4), np.float32)
    for i in range(count):
        while True:
            row = (rng.normal(size=V) * rng.choice([0.5, 2.0, 6.0])).astype(np.float32)
            if rng.random() < 0.4:
                row = np.round(row).astype(np.float32)
            param = np.array([rng.choice([0.0, 0.3, 0.7, 1.0, 1.6]),
                              rng.choice([0.0, 0.3, 0.8, 0.95, 1.0]),
                              rng.choice([0, 0, 1, 3, 10, V, V + 7]),
                              rng.integers(0, 2**24) * 2.0**-24], np.float32)
            if is_stable(row, param):
                break
        logits[i], params[i] = row, param
    return logits, params


def test_sample_random_rows(run):
    rng = np.random.default_rng(3)
    logits, params = random_rows(rng, 2000)
    expected = [host_sample(logits[i], params[i]) for i in range(len(logits))]
    assert run("sample", logits=logits, params=params).tolist() == expected


def test_unstable_rows_are_rare():
    rng = np.random.default_rng(4)
    logits = (rng.normal(size=(500, V)) * 2).astype(np.float32)
    params = np.stack([np.ones(500), np.full(500, 0.9), np.zeros(500), rng.random(500)], 1)
    unstable = sum(not is_stable(logits[i], params[i].astype(np.float32)) for i in range(500))
    assert unstable <= 5


def peaked(rng: np.random.Generator, tokens: list[int]) -> np.ndarray:
    """[W, V] logits whose argmax (and almost all the mass) is tokens[j] in row j."""
    rows = rng.normal(size=(len(tokens), V)).astype(np.float32)
    rows[np.arange(len(tokens)), tokens] = 40.0
    return rows


# (targets of rows 0..3, proposals d1..d3) -> expected accepted count
CASES = {
    "all_accepted": ([5, 9, 2, 30], [5, 9, 2], 3),
    "first_rejected": ([5, 9, 2, 30], [6, 9, 2], 0),
    "middle_rejected": ([5, 9, 2, 30], [5, 8, 2], 1),
    "last_rejected": ([5, 9, 2, 30], [5, 9, 3], 2),
}


def test_verify_argmax_cases(run):
    rng = np.random.default_rng(5)
    logits = np.stack([peaked(rng, targets) for targets, _, _ in CASES.values()])
    candidates = np.array([[1, *proposals] for _, proposals, _ in CASES.values()], np.int64)
    verdict = run("verify_argmax", logits=logits, candidates=candidates)
    expected = [[accepted, targets[accepted]] for targets, _, accepted in CASES.values()]
    assert verdict.dtype == np.int64
    assert verdict.tolist() == expected


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_verify_cases(run, temperature):
    rng = np.random.default_rng(6)
    logits = np.stack([peaked(rng, targets) for targets, _, _ in CASES.values()])
    candidates = np.array([[1, *proposals] for _, proposals, _ in CASES.values()], np.int64)
    params = np.zeros((len(CASES), 7), np.float32)
    params[:, 0], params[:, 1], params[:, 3:] = temperature, 1.0, rng.random((len(CASES), 4))
    verdict = run("verify", logits=logits, candidates=candidates, params=params)
    expected = [[accepted, targets[accepted]] for targets, _, accepted in CASES.values()]
    assert verdict.tolist() == expected
    assert verdict.tolist() == [host_verdict(logits[o], candidates[o], params[o])
                                for o in range(len(CASES))]


@pytest.mark.parametrize("width", [2, 3, 5, 8])
def test_verify_random_owners(run, width):
    """Owners with their own sampling; proposals copied from the host draws up to a chosen
    rejection point, so every accepted count 0..W-1 occurs."""
    rng = np.random.default_rng(10 + width)
    owners = 24
    logits = np.empty((owners, width, V), np.float32)
    params = np.empty((owners, 3 + width), np.float32)
    candidates = np.empty((owners, width), np.int64)
    for o in range(owners):
        rows, row_params = random_rows(rng, width)
        rows *= np.float32(3.0)  # peakier rows so proposals are meaningful
        shared = row_params[0, :3]
        row_params[:, :3] = shared
        while not all(is_stable(rows[j], row_params[j]) for j in range(width)):
            row_params[:, 3] = rng.integers(0, 2**24, width) * 2.0**-24
        logits[o], params[o, :3], params[o, 3:] = rows, shared, row_params[:, 3]
        targets = [host_sample(rows[j], row_params[j]) for j in range(width)]
        reject = o % width  # accept `reject` proposals, then a wrong one (none when W - 1)
        candidates[o] = [rng.integers(V), *targets[: width - 1]]
        if reject < width - 1:
            candidates[o, 1 + reject] = (targets[reject] + 1) % V
    verdict = run("verify", logits=logits, candidates=candidates, params=params)
    expected = [host_verdict(logits[o], candidates[o], params[o]) for o in range(owners)]
    assert verdict.tolist() == expected
    assert sorted({v[0] for v in expected}) == list(range(width))
    greedy = params[:, 0] == 0
    argmax_verdict = run("verify_argmax", logits=logits[greedy], candidates=candidates[greedy])
    assert argmax_verdict.tolist() == verdict[greedy].tolist()


def test_graph_io_names():
    model = make_verify(V)
    assert [i.name for i in model.graph.input] == ["logits", CANDIDATES, PARAMS]
    assert [o.name for o in model.graph.output] == [VERDICT]
    assert {op.domain for op in model.opset_import} == {""}
    assert model.opset_import[0].version == 23
