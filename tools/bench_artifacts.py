"""Decode tokens/s of several artifacts of one model side by side (e.g. float32, int4 at
accuracy level 0 and 4), interleaved round by round, as ratios to the first; and whether each
gives every prompt the same greedy tokens alone and in the batch.

    python tools/bench_artifacts.py DIR DIR... [--batches 1,8] [--prompt 64] [--decode 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, nargs="+")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt", type=int, default=64, help="prompt tokens per sequence")
    parser.add_argument("--decode", type=int, default=32, help="decode steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="best of N interleaved rounds")
    return parser.parse_args()


def alternating_args(doc: str, batches: str, setting: str) -> argparse.Namespace:
    """The arguments of a tool that times two settings of a decode step in child processes
    (bench_spinning.py, bench_lone_rows.py): ARTIFACT, --batches (default `batches`), --rounds,
    --steps, --prompt, --threads, and a child's hidden --one BATCH SETTING."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--batches", default=batches)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64, help="timed greedy decode steps")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per session")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--one", nargs=2, type=int, metavar=("BATCH", setting),
                        help=argparse.SUPPRESS)  # a child: one run, prints its result
    return parser.parse_args()


def alternate(script: str, args: argparse.Namespace, one_run, settings: tuple[int, int],
              report, label: str) -> None:
    """A child (--one BATCH SETTING) prints one_run(args, batch, setting) as JSON. Otherwise,
    for each batch, args.rounds rounds of one fresh child process per setting, in the order of
    `settings`: report(batch, {setting: result}) prints the round and returns its ratio, and
    each batch ends with its ratios per round, as `label`."""
    if args.one:
        print(json.dumps(one_run(args, args.one[0], bool(args.one[1]))))
        return
    print(f"{args.artifact}: {args.prompt}-token prompts, mean of {args.steps} greedy decode "
          f"steps, {args.threads} threads, one process per run")
    for batch in (int(b) for b in args.batches.split(",")):
        ratios = [report(batch, {s: child_run(script, args, batch, s) for s in settings})
                  for _ in range(args.rounds)]
        print(f"batch {batch}: {label} per round {[round(r, 3) for r in ratios]}")


def child_run(script: str, args: argparse.Namespace, batch: int, setting: int):
    """`script` run as a fresh process on `args.artifact` with `--one BATCH SETTING` and the
    same --steps, --prompt and --threads: what its last line printed, as JSON (the child
    runs of bench_spinning.py and bench_lone_rows.py)."""
    out = subprocess.run([sys.executable, script, str(args.artifact), "--one", str(batch),
                          str(setting), "--steps", str(args.steps), "--prompt",
                          str(args.prompt), "--threads", str(args.threads)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def decode(executor, prompts: np.ndarray, steps: int) -> tuple[float, list[list[int]]]:
    """Prefill every prompt in one batch, then `steps` decode steps; (decode seconds, tokens)."""
    from cellspec.runtime.types import BatchInput, Sampling

    sids = [executor.open_session() for _ in prompts]
    for sid in sids:
        executor.set_sampling(sid, Sampling())
    outs = executor.execute([BatchInput(s, tuple(int(t) for t in p), 0)
                             for s, p in zip(sids, prompts)])
    tokens = [[o.token] for o in outs]
    start = time.perf_counter()
    for _ in range(steps):
        outs = executor.execute([BatchInput(s, (t[-1],), executor.pos(s))
                                 for s, t in zip(sids, tokens)])
        for t, o in zip(tokens, outs):
            t.append(o.token)
    seconds = time.perf_counter() - start
    for sid in sids:
        executor.close_session(sid)
    return seconds, tokens


def main() -> None:
    from cellspec.runtime.executor import Executor

    args = parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    executors = [Executor.load(a, max_sessions=max(batches), threads=args.threads)
                 for a in args.artifacts]
    vocab = executors[0].manifest.model.vocab_size
    prompts = np.random.default_rng(0).integers(100, vocab, (max(batches), args.prompt))
    print(f"{args.prompt}-token prompts, {args.decode} decode steps, {args.threads} threads, "
          f"best of {args.rounds} interleaved rounds")
    for batch in batches:
        best = [float("inf")] * len(executors)
        batched = []
        for _ in range(args.rounds):
            for i, executor in enumerate(executors):
                seconds, tokens = decode(executor, prompts[:batch], args.decode)
                best[i] = min(best[i], seconds)
                if len(batched) < len(executors):
                    batched.append(tokens)
        for i, (path, executor) in enumerate(zip(args.artifacts, executors)):
            alone = [decode(executor, prompts[j:j + 1], args.decode)[1][0]
                     for j in range(batch)] if batch > 1 else batched[i]
            same = sum(a == b for a, b in zip(alone, batched[i]))
            rate = batch * args.decode / best[i]
            print(f"batch {batch:3d}  {path.name:24s} {rate:8.1f} tok/s  "
                  f"x{best[0] / best[i]:5.2f} vs {args.artifacts[0].name}  "
                  f"same alone/batched {same}/{batch}")


if __name__ == "__main__":
    main()
