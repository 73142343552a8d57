"""The host's side of `ort-cuda`'s decode calls, without a GPU: the IOBinding backend over
numpy memory (`HostDevice`) with every engine run, device-to-device copy, gather and commit
replaced by a no-op, so what is timed is the Python and numpy work a call costs on the host
(planning, staging, binding, drawing, the cache's bookkeeping; a tree's growth and walk, which
run as kernels on a GPU, in Python here). On the H200 this work is hidden behind the device in
plain decode chains, but not all of it in a DFlash cycle, whose host waits for the verify's
tokens.

    python tools/bench_host.py ARTIFACT [--n-draft 7] [--cycles 200] [--rounds 7] [--sessions 1]
        [--tree-nodes 15] [--profile]

ARTIFACT: an export with a draft (`cellspec export GGUF DIR --draft ...`). Prints ms per DFlash
round and per plain step of `--sessions` sessions at once (best and median of the rounds), the
share of it a verify runs `meanwhile` (the drain of its rows and, where the cycle walks on the
device, the next block and verify queued before its verdict: a device overlaps that with the
verify), how much of it is HostDevice's Python for the tree kernels (a GPU launches them: its
host does about the round less that), how many rounds walked on the device, the device calls a
round or step makes (`DeviceCalls`: each a PyCUDA or ONNX Runtime call of the host's on a GPU,
1-4 us for a PyCUDA copy or event and 3 us for a run replaying its CUDA graph on a quick H100
host, up to 26 us on slow ones: bench/NOTES.md), and with `--profile` a cProfile of the cycles.
The outputs of the no-op runs are whatever the buffers hold, so the drafts and draws are
meaningless, but each cycle commits, drains and queues as a real one does.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cellspec.artifact import Manifest  # noqa: E402
from cellspec.runtime import device_engine  # noqa: E402
from cellspec.runtime.device import HostDevice  # noqa: E402
from cellspec.runtime.dflash import DFlashExecutor  # noqa: E402
from cellspec.runtime.ort_device import OrtDeviceBackend, device_limits, device_policy  # noqa: E402
from cellspec.runtime.types import BatchInput, Sampling  # noqa: E402


def host_executor(folder: Path, n_draft: int, tree_nodes: int | None = None) -> DFlashExecutor:
    manifest = Manifest.load(folder)
    backend = OrtDeviceBackend("ort-host", HostDevice(), ["CPUExecutionProvider"],
                               device_limits(manifest, 8), device_policy(manifest),
                               folder / manifest.graphs["sample"],
                               "as-exported" if tree_nodes else "decomposed")
    if tree_nodes:  # CellAttention's host side: the runs are no-ops, so any attention will do
        backend.exact_trees = True
    return DFlashExecutor.load(folder, backend=backend, max_sessions=8, n_draft=n_draft,
                               tree_nodes=tree_nodes)


def without_device(executor: DFlashExecutor) -> None:
    """Every later engine run, device copy, commit and gather does nothing (uploads stay: a
    walk on the device reads the staged anchors' positions)."""
    device_engine.DeviceEngine._run = lambda self, session, options: None
    device = executor.backend.device
    for name in ("commit", "gather", "copy"):
        setattr(device, name, lambda *args: None)


class Timed:
    """Seconds the host spends in the calls wrapped by `timed`."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def timed(self, work):
        def run(*args):
            start = time.perf_counter()
            result = work(*args)
            self.seconds += time.perf_counter() - start
            return result
        return run


class Behind(Timed):
    """Seconds the host spends in the work a verify runs `meanwhile` (the drain of its rows):
    on a device that work overlaps the verify, so it is off a cycle's critical path."""

    def __init__(self, executor: DFlashExecutor) -> None:
        super().__init__()
        forward = executor.target.forward

        def timed_forward(*args, meanwhile=None, **kwargs):
            return forward(*args, meanwhile=None if meanwhile is None else self.timed(meanwhile),
                           **kwargs)

        executor.target.forward = timed_forward
        # a tree cycle's meanwhile work is its drain, whichever way its verify runs, and
        # where it walks on the device, the next cycle's block and verify queued before its
        # verdict
        for name in ("_drain_trees", "_queue_past_verdict", "_launch_past_verdict"):
            setattr(executor, name, self.timed(getattr(executor, name)))


class Kernels(Timed):
    """Seconds the host spends in HostDevice's stand-ins for the device's tree kernels (a tree's
    growth, its walk, its rows' uniforms): Python here, one launch each on a GPU, so a round's
    host time there is about the round's here less these."""

    def __init__(self, device: HostDevice) -> None:
        super().__init__()
        for name in ("grow_trees", "walk_trees", "tree_uniforms"):
            setattr(device, name, self.timed(getattr(device, name)))


class DeviceCalls:
    """How many times each device operation is called (HostDevice's copies, marks and kernel
    launches, the engines' runs): on a GPU each is a call of the host's into PyCUDA or ONNX
    Runtime, whose cost a round pays whatever its Python costs."""

    OPERATIONS = ("upload", "download", "download_later", "mark", "synchronize", "copy",
                  "commit", "gather", "grow_trees", "walk_trees", "tree_uniforms")

    def __init__(self, device: HostDevice) -> None:
        self.counts: dict[str, int] = dict.fromkeys(self.OPERATIONS + ("engine run",), 0)
        for name in self.OPERATIONS:
            setattr(device, name, self.counted(name, getattr(device, name)))
        device_engine.DeviceEngine._run = self.counted("engine run",
                                                       device_engine.DeviceEngine._run)

    def counted(self, name: str, work):
        def call(*args):
            self.counts[name] += 1
            return work(*args)
        return call

    def per_call(self, calls: int) -> dict[str, float]:
        """Each operation's count over `calls` calls (those made at least once)."""
        return {name: count / calls for name, count in self.counts.items() if count}


def time_calls(executor: DFlashExecutor, tokens: dict[int, int], cycles: int, rounds: int,
               speculate: bool) -> list[float]:
    """ms per `execute` call of every session in `tokens` (sid -> its pending token; a round of
    cycles when `speculate`, else a plain step), per round; a session is rewound to 128 tokens
    whenever it passes 900. Updates `tokens`."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(cycles):
            for sid in tokens:
                if executor.pos(sid) > 900:
                    executor.rewind(sid, 128)
                if not speculate:
                    executor.sessions.sessions[sid].draft.pending = None  # a plain step
            outs = executor.execute([BatchInput(sid, (token,), executor.pos(sid))
                                     for sid, token in tokens.items()])
            for out in outs:
                tokens[out.sid] = out.tokens[-1]
        times.append(1e3 * (time.perf_counter() - start) / cycles)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--n-draft", type=int, default=7)
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=1,
                        help="sessions in every call (at most 8), each with its own prompt")
    parser.add_argument("--tree-nodes", type=int, default=None,
                        help="trees of this many proposals instead of chains (the host's side "
                        "of ort-cuda with CellAttention)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if not 1 <= args.sessions <= 8:
        parser.error("--sessions must be in [1, 8]")
    executor = host_executor(args.artifact, args.n_draft, args.tree_nodes)
    executor.max_spec_batch = None  # every session speculates
    rng = np.random.default_rng(0)
    tokens = {}
    for _ in range(args.sessions):
        sid = executor.open_session()
        executor.set_sampling(sid, Sampling(), 1)
        prompt = tuple(rng.integers(3, 1000, 128).tolist())
        tokens[sid] = executor.execute([BatchInput(sid, prompt, 0)])[0].token
    without_device(executor)
    behind = Behind(executor)
    kernels = Kernels(executor.backend.device)
    device_calls = DeviceCalls(executor.backend.device)
    time_calls(executor, tokens, 20, 1, True)  # warm the memos
    for name, speculate in (("DFlash round", True), ("plain step", False)):
        behind.seconds = kernels.seconds = 0.0
        device_calls.counts = dict.fromkeys(device_calls.counts, 0)
        rounds, walked = executor.stats.rounds, executor.stats.walked
        times = time_calls(executor, tokens, args.cycles, args.rounds, speculate)
        overlapped = 1e3 * behind.seconds / (args.cycles * args.rounds)
        emulated = 1e3 * kernels.seconds / (args.cycles * args.rounds)
        rounds, walked = executor.stats.rounds - rounds, executor.stats.walked - walked
        print(f"{name}, {args.sessions} session(s): host ms best {min(times):.3f}, median "
              f"{statistics.median(times):.3f} ({args.rounds} rounds of {args.cycles}); of "
              f"which behind the verify (overlapped on a device) {overlapped:.3f} on average, "
              f"in the tree kernels' Python stand-ins (launches on a GPU) {emulated:.3f}, "
              f"so best less them {min(times) - emulated:.3f}"
              + (f"; {walked} of {rounds} rounds queued the next before their verdict"
                 if rounds else ""))
        calls = device_calls.per_call(args.cycles * args.rounds)
        print(f"  device calls a {name.split()[-1]}: {sum(calls.values()):.1f} ("
              + ", ".join(f"{op} {count:.2f}" for op, count in calls.items()) + ")")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        time_calls(executor, tokens, args.cycles, 1, True)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
