"""What the Q4_1 offsets of an int4 artifact cost on the CPU.

The target graph in three forms, on feeds captured from the runtime's decode steps (a 128-token
prompt per session, then decode steps), timed unprofiled and interleaved:

- "exported": per projection Reshape + ReduceSum (x summed per block) + MatMul (by the blocks'
  offsets) + Add, as `cellspec export --quantize int4` writes it;
- "ones": the block sums as one MatMul of x by a 0/1 [K, blocks] matrix (one node fewer, and
  another summation order);
- "none": no offsets at all. Wrong numbers: the bound on what the offsets can cost.

    python tools/probe_int4_offsets.py ARTIFACT [--batch 1] [--rounds 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def captured_feeds(artifact: Path, batch: int) -> tuple[dict, list[str]]:
    """The target's feeds and outputs of the last of 3 decode steps at `batch` sessions."""
    from cellspec.runtime import ort_cpu
    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import BatchInput, Sampling

    captured = []
    run = ort_cpu.OrtCpuEngine.run

    def capture(engine, feeds, names):
        if engine.path.name == "target.onnx":
            captured.append((dict(feeds), names))
        return run(engine, feeds, names)

    ort_cpu.OrtCpuEngine.run = capture
    try:
        executor = Executor.load(artifact, backend="ort-cpu", max_sessions=batch)
        sids = [executor.open_session() for _ in range(batch)]
        for sid in sids:
            executor.set_sampling(sid, Sampling(), 0)
        rng = np.random.default_rng(0)
        outs = executor.execute([BatchInput(s, tuple(rng.integers(3, 1000, 128).tolist()), 0)
                                 for s in sids])
        for _ in range(3):
            outs = executor.execute([BatchInput(o.sid, (o.tokens[-1],), executor.pos(o.sid))
                                     for o in outs])
    finally:
        ort_cpu.OrtCpuEngine.run = run
    return captured[-1]


def attribute(node: onnx.NodeProto, name: str) -> int:
    return next(a.i for a in node.attribute if a.name == name)


def variant(model: onnx.ModelProto, kind: str) -> onnx.ModelProto:
    """`model` with its offsets as `kind` ("ones" or "none", module doc)."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    by_name = {n.name: n for n in model.graph.node}
    nodes, drop = [], set()
    for node in model.graph.node:
        if kind == "none" and node.name.endswith("/offsets/Add"):
            base = node.name[: -len("/offsets/Add")]
            nodes.append(helper.make_node("Identity", [node.input[0]], list(node.output),
                                          name=node.name))
            drop |= {f"{base}/offsets/MatMul", f"{base}/blocks/ReduceSum",
                     f"{base}/blocks/Reshape"}
        elif kind == "ones" and node.name.endswith("/blocks/ReduceSum"):
            base = node.name[: -len("/blocks/ReduceSum")]
            matmul = by_name[f"{base}/MatMulNBits"]
            K, block = attribute(matmul, "K"), attribute(matmul, "block_size")
            ones = np.zeros((K, K // block), np.float32)
            ones[np.arange(K), np.arange(K) // block] = 1
            result.graph.initializer.append(numpy_helper.from_array(ones, f"{base}/blocks/ones"))
            nodes.append(helper.make_node("MatMul", [by_name[f"{base}/blocks/Reshape"].input[0],
                                                     f"{base}/blocks/ones"],
                                          list(node.output), name=node.name))
            drop.add(f"{base}/blocks/Reshape")
        else:
            nodes.append(node)
    del result.graph.node[:]
    result.graph.node.extend(n for n in nodes if n.name not in drop)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=16)
    args = parser.parse_args()
    from cellspec.runtime.ort_cpu import OrtCpuEngine

    feeds, names = captured_feeds(args.artifact, args.batch)
    exported = args.artifact / "target.onnx"
    model = onnx.load(str(exported), load_external_data=False)
    # the runtime's own sessions (its options, attention by position), threads spinning
    engines, made = {"exported": OrtCpuEngine(exported, 2, spinning=True)}, []
    try:
        for kind in ("ones", "none"):
            path = args.artifact / f"target-probe-{kind}.onnx"  # beside the weights it reads
            onnx.save(variant(model, kind), str(path))
            made.append(path)
            engines[kind] = OrtCpuEngine(path, 2, spinning=True)
    finally:
        for path in made:
            path.unlink()
    want = engines["exported"].run(feeds, names)["logits"]
    for kind in ("ones", "none"):
        got = engines[kind].run(feeds, names)["logits"]
        print(f"{kind}: max |logits - exported's| {np.abs(got - want).max():.3g}, "
              f"same argmax {bool((got.argmax(-1) == want.argmax(-1)).all())}")
    times = {kind: [] for kind in engines}
    for _ in range(args.rounds):
        for kind, engine in engines.items():
            start = time.perf_counter()
            for _ in range(10):
                engine.run(feeds, names)
            times[kind].append((time.perf_counter() - start) / 10 * 1e3)
    for kind, values in times.items():
        print(f"{kind}: session.run {statistics.median(values):.2f} ms median, "
              f"{min(values):.2f} best of {args.rounds} rounds of 10")


if __name__ == "__main__":
    main()
