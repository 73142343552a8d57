"""Decode step time at batch 1, 8 and 32 with about 1024 tokens of context per session, per
token, for one artifact and one checkout of cellspec's runtime (so graph ABI v1 and v2 can be
measured the same way: `--checkout` points at the source tree to import).

    python tools/bench_batch_scaling.py ARTIFACT [--checkout DIR] [--batches 1,8,32] \\
        [--context 1024] [--steps 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--checkout", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(args.checkout))
    import numpy as np

    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import BatchInput, Sampling

    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        executor = Executor.load(args.artifact, max_sessions=batch,
                                 max_session_tokens=args.context + args.steps + 8,
                                 threads=args.threads)
        rng = np.random.default_rng(batch)
        sids = [executor.open_session() for _ in range(batch)]
        for sid in sids:
            executor.set_sampling(sid, Sampling())
        tokens = []
        for sid in sids:  # prefill one session at a time: memory stays bounded
            prompt = tuple(rng.integers(100, 40000, args.context).tolist())
            tokens.append(executor.execute([BatchInput(sid, prompt, 0)])[0].token)
        times = []
        for _ in range(args.steps):
            start = time.perf_counter()
            outs = executor.execute([BatchInput(s, (t,), executor.pos(s))
                                     for s, t in zip(sids, tokens)])
            times.append(time.perf_counter() - start)
            tokens = [o.token for o in outs]
        step = statistics.median(times)
        rows.append({"batch": batch, "context": args.context, "step_ms": 1e3 * step,
                     "ms_per_token": 1e3 * step / batch})
        print(json.dumps(rows[-1]), flush=True)
        del executor


if __name__ == "__main__":
    main()
