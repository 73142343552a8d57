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
import json
from pathlib import Path

import numpy as np


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--batches", default="1")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64, help="timed greedy decode steps")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per session")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", nargs=2, type=int, metavar=("BATCH", "PAD"),
                        help=argparse.SUPPRESS)  # a child: one run, prints step and tokens
    return parser.parse_args()


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


def main() -> None:
    from bench_artifacts import child_run  # this folder: sys.path[0] when run as a script

    args = parse_args()
    if args.one:
        print(json.dumps(one_run(args, args.one[0], bool(args.one[1]))))
        return
    print(f"{args.artifact}: {args.prompt}-token prompts, mean of {args.steps} greedy decode "
          f"steps, {args.threads} threads, one process per run")
    for batch in (int(b) for b in args.batches.split(",")):
        ratios = []
        for _ in range(args.rounds):
            run = {}
            for pad in (1, 0):
                run[pad] = child_run(__file__, args, batch, pad)
            ratios.append(run[0]["step"] / run[1]["step"])
            print(f"batch {batch}: padded {1e3 * run[1]['step']:.2f} ms, ort-cpu's policy "
                  f"(lone_row_tile {run[0]['lone_row_tile']}) {1e3 * run[0]['step']:.2f} ms a "
                  f"step: x {ratios[-1]:.3f}; same tokens: {run[0]['tokens'] == run[1]['tokens']}",
                  flush=True)
        print(f"batch {batch}: policy / padded per round {[round(r, 3) for r in ratios]}")


if __name__ == "__main__":
    main()
