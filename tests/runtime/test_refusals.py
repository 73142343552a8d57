"""Every refusal is a project error, and a refused call leaves the runtime exactly as it was."""

import json
import shutil

import numpy as np
import pytest

from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling


def snapshot(executor):
    sessions = {sid: (s.sampling, s.seed, s.is_poisoned)
                for sid, s in executor.sessions.sessions.items()}
    pools = {name: pool.tobytes() for name, pool in executor.target.pools.arrays.items()}
    return executor.cache.snapshot(), sessions, pools


@pytest.fixture
def busy(make_executor):
    """Two sessions with history, one with sampling set, one without; a closed id."""
    executor = make_executor(max_sessions=3, max_session_tokens=64)
    a, b, closed = (executor.open_session() for _ in range(3))
    executor.set_sampling(a, Sampling(temperature=0.7), seed=3)
    executor.execute([BatchInput(a, (5, 6, 7), 0), BatchInput(b, (9, 9), 0, False)])
    executor.close_session(closed)
    return executor, a, b, closed


BAD_BATCHES = {
    "unknown session": lambda a, b, c: [BatchInput(99, (1,), 0)],
    "closed session": lambda a, b, c: [BatchInput(c, (1,), 0)],
    "token past vocab": lambda a, b, c: [BatchInput(a, (256,), 3)],
    "negative token": lambda a, b, c: [BatchInput(a, (-1,), 3)],
    "non-int token": lambda a, b, c: [BatchInput(a, (1.5,), 3)],
    "empty tokens": lambda a, b, c: [BatchInput(a, (), 3)],
    "negative position": lambda a, b, c: [BatchInput(a, (1,), -1)],
    "past frontier": lambda a, b, c: [BatchInput(a, (1,), 4)],
    "past budget": lambda a, b, c: [BatchInput(a, (1,) * 62, 3)],
    "two inputs one session": lambda a, b, c: [BatchInput(a, (1,), 3), BatchInput(a, (2,), 4)],
    "output without sampling": lambda a, b, c: [BatchInput(b, (1,), 2)],
    "valid then invalid": lambda a, b, c: [BatchInput(a, (1,), 3), BatchInput(b, (300,), 2)],
    "empty batch": lambda a, b, c: [],
    "not a BatchInput": lambda a, b, c: [(a, (1,), 3)],
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_batch_changes_nothing(busy, case):
    executor, a, b, closed = busy
    before = snapshot(executor)
    with pytest.raises(InvalidArgument) as error:
        executor.execute(BAD_BATCHES[case](a, b, closed))
    assert str(error.value)
    assert snapshot(executor) == before
    executor.cache.check()
    # the runtime still works afterwards
    assert executor.execute([BatchInput(a, (1,), 3)])[0].sid == a


@pytest.mark.parametrize("sampling", [
    dict(temperature=-1.0), dict(temperature=float("nan")), dict(temperature=float("inf")),
    dict(top_p=1.5), dict(top_p=-0.1), dict(top_p=float("nan")), dict(top_k=-1),
    dict(top_k=2.5),
])
def test_invalid_sampling_values(busy, sampling):
    executor, a, *_ = busy
    before = snapshot(executor)
    with pytest.raises(InvalidArgument):
        executor.set_sampling(a, Sampling(**sampling))
    assert snapshot(executor) == before


def test_bad_session_calls_change_nothing(busy):
    executor, a, b, closed = busy
    before = snapshot(executor)
    calls = [
        lambda: executor.set_sampling(a, Sampling(), seed=-5),
        lambda: executor.set_sampling(closed, Sampling()),
        lambda: executor.set_sampling(a, {"temperature": 0}),
        lambda: executor.clone(a, 4),
        lambda: executor.clone(a, -1),
        lambda: executor.clone(closed, 0),
        lambda: executor.rewind(a, 9),
        lambda: executor.rewind(closed, 0),
        lambda: executor.close_session(closed),
        lambda: executor.close_session("a"),
    ]
    for call in calls:
        with pytest.raises(InvalidArgument):
            call()
        assert snapshot(executor) == before
    executor.open_session()  # the third slot is free again
    with pytest.raises(InvalidArgument, match="all 3 sessions are open"):
        executor.open_session()
    with pytest.raises(InvalidArgument, match="all 3 sessions are open"):
        executor.clone(a, 1)


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_sessions=0), "max_sessions 0"),
    (dict(max_sessions=2, max_session_tokens=300), "exceeds the model's context of 256"),
    (dict(max_sessions=4, max_session_tokens=200), "exceed the pool's 512 cells"),
    (dict(max_sessions=600), "leave no cell budget"),
    (dict(max_session_tokens=-1), "max_session_tokens -1"),
    (dict(backend="tpu"), "backend 'tpu'"),
    (dict(threads=0), "threads 0"),
    (dict(threads="2"), "threads '2'"),
    (dict(threads=2.5), "threads 2.5"),
    (dict(threads=10**6), "threads 1000000"),
])
def test_load_limits(tiny_artifact, kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        Executor.load(tiny_artifact, **kwargs)


def test_default_budget_fills_the_pool(tiny_artifact):
    executor = Executor.load(tiny_artifact, max_sessions=4)
    assert executor.max_session_tokens == min(256, 511 // 4)


@pytest.fixture
def artifact_copy(tiny_artifact, tmp_path):
    return shutil.copytree(tiny_artifact, tmp_path / "copy")


def edit_manifest(folder, edit):
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["model"].update(vocab_size=300), "model.vocab_size"),
    (lambda d: d.update(max_cells=1024), "max_cells"),
    (lambda d: d["target_cache"][1].update(kv_heads=4), r"target_cache\[1\]"),
    (lambda d: d["target"].update(tap_layer_ids=[0]), "tap_layer_ids"),
    (lambda d: d.update(format_version=99), "format_version"),
    (lambda d: d["target"].update(static_widths=[4, 2]), "static_widths"),
    (lambda d: d.pop("max_context"), "max_context"),
])
def test_manifest_disagreeing_with_graph(artifact_copy, edit, message):
    edit_manifest(artifact_copy, edit)
    with pytest.raises(InvalidArtifact, match=message):
        Executor.load(artifact_copy)


def test_missing_and_corrupt_files(artifact_copy):
    (artifact_copy / "target.onnx").write_bytes(b"\x08\x07garbage" * 10)
    with pytest.raises(InvalidArtifact, match="cannot load"):
        Executor.load(artifact_copy)
    (artifact_copy / "target.onnx").unlink()
    with pytest.raises(InvalidArtifact, match="graph file missing"):
        Executor.load(artifact_copy)
    (artifact_copy / "manifest.json").write_text("{not json")
    with pytest.raises(InvalidArtifact, match="not readable JSON"):
        Executor.load(artifact_copy)
    (artifact_copy / "manifest.json").unlink()
    with pytest.raises(InvalidArtifact, match="no manifest.json"):
        Executor.load(artifact_copy)


def test_truncated_weights(artifact_copy):
    weights = artifact_copy / "weights.bin"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(InvalidArtifact):
        Executor.load(artifact_copy)


def test_failed_step_poisons_the_sessions_it_touched(busy, monkeypatch):
    from cellspec.errors import ExecutionFailed

    executor, a, b, _ = busy
    def broken(feeds, names):
        raise ExecutionFailed("target.onnx: ONNX Runtime run failed: injected")
    monkeypatch.setattr(executor.target.engine, "run", broken)
    with pytest.raises(ExecutionFailed, match=r"sessions \[\d+\] are poisoned") as error:
        executor.execute([BatchInput(a, (1,), 3)])
    assert error.value.poisoned == (a,)
    with pytest.raises(InvalidArgument, match="poisoned"):
        executor.execute([BatchInput(a, (1,), 3)])
    executor.close_session(a)
    executor.cache.check()
    assert np.all(executor.cache.cell_refs[executor.cache.cells_of(b)] == 1)


def test_bfloat16_artifact_is_refused_by_the_cpu_backend(artifact_copy):
    edit_manifest(artifact_copy, lambda d: d["model"].update(dtype="bfloat16"))
    with pytest.raises(InvalidArgument, match="bfloat16"):
        Executor.load(artifact_copy)


@pytest.mark.parametrize("temperature", [1e-5, 1e-40, 5e-324])
def test_temperatures_that_overflow_float32_are_refused(temperature):
    with pytest.raises(InvalidArgument, match="temperature"):
        Sampling(temperature=temperature)
