"""tools/bench_host.py's count of the device calls a DFlash round makes (each a PyCUDA or ONNX
Runtime call of the host's on a GPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cellspec.runtime import device_engine
from cellspec.runtime.types import BatchInput, Sampling
from tests.conftest import export_dflash

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import bench_host  # noqa: E402


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    return export_dflash(tmp_path_factory.mktemp("bench-host"), static_widths=(1, 2, 4, 8),
                         dynamic_width=32, max_context=128, max_cells=512)


@pytest.mark.parametrize("tree_nodes", [3, None])
def test_a_round_counts_its_device_calls(artifact, tree_nodes, monkeypatch):
    """A round of trees walked on the device: three engine runs (the verify, the next draft block
    queued before the verdict, the draft's drain of the verify's rows), each staged in one
    upload of its arena, which holds the cells it commits and gathers from too (since
    2026-12-07, seventeenth sitting; one upload each before); two commits (the verify's rows
    into the target's pools and its taps pool in one, the drain's into the draft's); a growth of
    the next trees, two walks (into the block's inputs and the verify's), the verify's tokens
    and the records of the growth and of the block's walk copied back (the verify's walk gives
    the same: not copied, since 2026-12-07); a mark after every upload and copy back; each run
    waiting for its inputs (HostDevice's engines are not queued in order). Chains: no tree
    kernels, the verify's tokens the one copy back, the block's choices fetched."""
    monkeypatch.setattr(device_engine.DeviceEngine, "_run", device_engine.DeviceEngine._run)
    executor = bench_host.host_executor(artifact, 4, tree_nodes)
    executor.max_spec_batch = None
    sid = executor.open_session()
    executor.set_sampling(sid, Sampling(), 1)
    tokens = {sid: executor.execute([BatchInput(sid, tuple(range(3, 11)), 0)])[0].token}
    bench_host.without_device(executor)
    calls = bench_host.DeviceCalls(executor.backend.device)
    bench_host.time_calls(executor, tokens, 2, 1, True)  # the first rounds queue ahead
    calls.counts = dict.fromkeys(calls.counts, 0)
    rounds, walked = executor.stats.rounds, executor.stats.walked
    bench_host.time_calls(executor, tokens, 6, 1, True)
    assert executor.stats.rounds - rounds == 6
    common = {"upload": 3.0, "synchronize": 3.0, "commit": 2.0, "gather": 1.0,
              "engine run": 3.0}
    if tree_nodes:
        assert executor.stats.walked - walked == 6
        assert calls.per_call(6) == {**common, "download_later": 3.0, "mark": 6.0,
                                     "grow_trees": 1.0, "walk_trees": 2.0}
    else:
        assert calls.per_call(6) == {**common, "download": 1.0, "download_later": 1.0,
                                     "mark": 4.0}
