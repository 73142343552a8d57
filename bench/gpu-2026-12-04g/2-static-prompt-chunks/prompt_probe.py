"""Time to a prompt's first token on ort-cuda (CellAttention), by prompt length, with prompts
cut into static pieces (static_runs as given) or not (0): plain Executor and DFlashExecutor
(trees of 15), the two settings alternating in one process, median of --reps per length."""
import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling

parser = argparse.ArgumentParser()
parser.add_argument("artifact", type=Path)
parser.add_argument("--lengths", default="24,33,40,48,56,64,80,96,128")
parser.add_argument("--statics", default="128,0")
parser.add_argument("--reps", type=int, default=15)
args = parser.parse_args()
rows = []
for kind in ("plain", "spec"):
    execs = {}
    for static in [int(s) for s in args.statics.split(",")]:
        ex = (Executor.load(args.artifact, backend="ort-cuda", max_sessions=4) if kind == "plain"
              else DFlashExecutor.load(args.artifact, backend="ort-cuda", max_sessions=4,
                                       tree_nodes=15))
        for model in (ex.target, getattr(ex, "draft", None)):
            if model is not None:
                model.policy = replace(model.policy, static_runs=static)
        execs[static] = ex
    for length in [int(n) for n in args.lengths.split(",")]:
        prompt = tuple(range(1000, 1000 + length))
        times = {s: [] for s in execs}
        for rep in range(args.reps + 2):
            for static, ex in execs.items():
                sid = ex.open_session()
                ex.set_sampling(sid, Sampling(), 1)
                start = time.perf_counter()
                token = ex.execute([BatchInput(sid, prompt, 0)])[0].token
                first = time.perf_counter() - start
                # and one more call: a speculating session's first cycle (queued at the prefill)
                start = time.perf_counter()
                ex.execute([BatchInput(sid, (token,), length)])
                second = time.perf_counter() - start
                ex.close_session(sid)
                if rep >= 2:
                    times[static].append((first, second))
        row = {"kind": kind, "length": length}
        for static, ts in times.items():
            row[f"first_ms@{static}"] = round(1e3 * statistics.median(t[0] for t in ts), 3)
            row[f"second_ms@{static}"] = round(1e3 * statistics.median(t[1] for t in ts), 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
