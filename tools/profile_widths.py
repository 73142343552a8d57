"""Latency of one target step per width: what a wider step (prefill, verify) costs.

    python tools/profile_widths.py ARTIFACT [--widths 1,2,4,8,16,32] [--context 128] [--repeats 5]

For each width w, one session holds `context` tokens; the step feeds w more (then rewinds), and
the best of `repeats` timings of the engine call is printed with its ratio to width 1.
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
    print(f"{args.artifact}: context {args.context}, best of {args.repeats}")
    print(f"{'width':>5} {'ms':>8} {'ms/token':>9} {'x width 1':>9}")
    base = None
    for width in [int(w) for w in args.widths.split(",")]:
        best = float("inf")
        for _ in range(args.repeats):
            tokens = tuple(rng.integers(0, vocab, width).tolist())
            start = time.perf_counter()
            executor.execute([BatchInput(sid, tokens, args.context, False)])
            best = min(best, time.perf_counter() - start)
        base = base or best
        print(f"{width:>5} {1e3 * best:>8.1f} {1e3 * best / width:>9.2f} {best / base:>9.2f}")


if __name__ == "__main__":
    main()
