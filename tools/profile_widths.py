"""Latency of one target step per width: what a wider step (prefill, verify) costs.

    python tools/profile_widths.py ARTIFACT [--widths 1,2,4,8,16,32] [--context 128] [--repeats 5]

For each width w, one session holds `context` tokens; the step feeds w more (then rewinds).
Each width runs once to warm up, then the widths take turns, `repeats` rounds, so that a slow
spell of the machine lands on every width alike (timed one width after another, this 2-core
machine once showed width 2 at 1.40x width 1 where the engine calls were level). The best and
the median of each width's timings are printed, with the best's ratio to the first width's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--widths", default="1,2,4,8,16,32")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import BatchInput

    executor = Executor.load(args.artifact, max_sessions=1, threads=args.threads)
    sid = executor.open_session()
    rng = np.random.default_rng(0)
    vocab = executor.vocab_size
    executor.execute([BatchInput(sid, tuple(rng.integers(0, vocab, args.context).tolist()), 0,
                                 False)])
    widths = [int(w) for w in args.widths.split(",")]

    def step(width: int) -> float:
        tokens = tuple(rng.integers(0, vocab, width).tolist())
        start = time.perf_counter()
        executor.execute([BatchInput(sid, tokens, args.context, False)])
        return time.perf_counter() - start

    for width in widths:
        step(width)
    timings: dict[int, list[float]] = {width: [] for width in widths}
    for _ in range(args.repeats):
        for width in widths:
            timings[width].append(step(width))
    print(f"{args.artifact}: context {args.context}, {args.repeats} rounds over the widths")
    print(f"{'width':>5} {'best ms':>8} {'median':>8} {'ms/token':>9} {'x first':>8}")
    base = min(timings[widths[0]])
    for width in widths:
        best, median = min(timings[width]), float(np.median(timings[width]))
        print(f"{width:>5} {1e3 * best:>8.1f} {1e3 * median:>8.1f} {1e3 * best / width:>9.2f} "
              f"{best / base:>8.2f}")


if __name__ == "__main__":
    main()
