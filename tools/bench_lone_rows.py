"""Greedy decoding of an int4 artifact on `ort-cpu` with the padding row that keeps a row from
being alone in its tile of 128 (ShapePolicy.lone_row_tile) and without it: the mean decode step
of each, one fresh process per run, alternating round by round, as ratios (without over with),
and whether the two decoded the same tokens. ort-cpu pads only where this CPU's MatMulNBits
rounds a lone row apart (ort_cpu.lone_rows_round_apart); where it does not, the padding is a
pure cost, which this measures.

    python tools/bench_lone_rows.py ARTIFACT [--batches 1] [--rounds 3] [--steps 64]
"""

from __future__ import annotations

import argparse

import numpy as np


def one_run(args: argparse.Namespace, batch: int, pad: bool) -> dict:
    """A decode step's seconds (the mean of `args.steps`, after a warm-up of 3) and the tokens,
    with every lone row padded (`pad`) or with the policy ort-cpu picks for this CPU."""
    from bench_artifacts import decode  # this folder: sys.path[0] when run as a script

    from cellspec.runtime.executor import Executor
    from cellspec.runtime.ort_cpu import OrtCpuBackend
    from cellspec.runtime.planner import ShapePolicy

    class Padded(OrtCpuBackend):
        def shape_policy(self, manifest, folder):
            policy = super().shape_policy(manifest, folder)
            return ShapePolicy(lone_row_tile=128, cell_multiple=policy.cell_multiple)

    backend = (Padded if pad else OrtCpuBackend)(args.threads, True)
    executor = Executor.load(args.artifact, backend=backend, max_sessions=batch)
    prompts = np.random.default_rng(0).integers(100, 1000, (batch, args.prompt))
    decode(executor, prompts, 3)
    seconds, tokens = decode(executor, prompts, args.steps)
    return {"step": seconds / args.steps, "tokens": tokens,
            "lone_row_tile": executor.target.policy.lone_row_tile}


def report(batch: int, run: dict) -> float:
    """One round's line; its ratio, ort-cpu's policy over padded."""
    ratio = run[0]["step"] / run[1]["step"]
    print(f"batch {batch}: padded {1e3 * run[1]['step']:.2f} ms, ort-cpu's policy "
          f"(lone_row_tile {run[0]['lone_row_tile']}) {1e3 * run[0]['step']:.2f} ms a "
          f"step: x {ratio:.3f}; same tokens: {run[0]['tokens'] == run[1]['tokens']}",
          flush=True)
    return ratio


def main() -> None:
    from bench_artifacts import alternate, alternating_args  # this folder: sys.path[0]

    args = alternating_args(__doc__, "1", "PAD")
    alternate(__file__, args, one_run, (1, 0), report, "policy / padded")


if __name__ == "__main__":
    main()
