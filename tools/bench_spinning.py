"""Plain decoding with ONNX Runtime's pool threads spinning between runs and sleeping, on
`ort-cpu`: the mean decode step of each, one fresh process per run (two executors in one
process would alternate their sessions, which is what spinning must not meet), alternating
settings round by round, as ratios (spinning over sleeping) per round.

    python tools/bench_spinning.py ARTIFACT [--batches 1,8] [--rounds 3] [--steps 64]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64, help="timed greedy decode steps")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per session")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", nargs=2, type=int, metavar=("BATCH", "SPINNING"),
                        help=argparse.SUPPRESS)  # a child: one run, prints its median step
    return parser.parse_args()


def one_run(args: argparse.Namespace, batch: int, spinning: bool) -> float:
    """Seconds a decode step of `batch` sessions takes (the mean of `args.steps`, after a
    warm-up of 3), prompts decoded by bench_artifacts' loop."""
    from bench_artifacts import decode  # this folder: sys.path[0] when run as a script

    from cellspec.runtime.executor import Executor
    from cellspec.runtime.ort_cpu import OrtCpuBackend

    executor = Executor.load(args.artifact, backend=OrtCpuBackend(args.threads, spinning),
                             max_sessions=batch)
    prompts = np.random.default_rng(0).integers(100, 1000, (batch, args.prompt))
    decode(executor, prompts, 3)
    return decode(executor, prompts, args.steps)[0] / args.steps


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
            step = {}
            for spinning in (0, 1):
                step[spinning] = child_run(__file__, args, batch, spinning)
            ratios.append(step[1] / step[0])
            print(f"batch {batch}: sleeping {1e3 * step[0]:.2f} ms, spinning "
                  f"{1e3 * step[1]:.2f} ms a step: x {ratios[-1]:.3f}", flush=True)
        print(f"batch {batch}: spinning / sleeping per round {[round(r, 3) for r in ratios]}")


if __name__ == "__main__":
    main()
