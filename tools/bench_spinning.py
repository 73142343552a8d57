"""Plain decoding with ONNX Runtime's pool threads spinning between runs and sleeping, on
`ort-cpu`: the mean decode step of each, one fresh process per run (two executors in one
process would alternate their sessions, which is what spinning must not meet), alternating
settings round by round, as ratios (spinning over sleeping) per round.

    python tools/bench_spinning.py ARTIFACT [--batches 1,8] [--rounds 3] [--steps 64]
"""

from __future__ import annotations

import argparse

import numpy as np


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


def report(batch: int, step: dict) -> float:
    """One round's line; its ratio, spinning over sleeping."""
    ratio = step[1] / step[0]
    print(f"batch {batch}: sleeping {1e3 * step[0]:.2f} ms, spinning {1e3 * step[1]:.2f} ms a "
          f"step: x {ratio:.3f}", flush=True)
    return ratio


def main() -> None:
    from bench_artifacts import alternate, alternating_args  # this folder: sys.path[0]

    args = alternating_args(__doc__, "1,8", "SPINNING")
    alternate(__file__, args, one_run, (0, 1), report, "spinning / sleeping")


if __name__ == "__main__":
    main()
