"""How a speculative round's wall time follows the host's time (2026-12-07, sixteenth sitting):
trees of 15 on `ort-cuda` (the real SmolLM2 float16, the shipped draft, held-out prompts one at
a time, 256-token greedy answers) with a busy wait of D us added to the host's side of every
round (before `DFlashExecutor.speculate`), D in 0, 25, 50, 100, 200, interleaved by block with
the order rotating; and with D = 0 on CUDA graphs of the engine's own (CELLSPEC_CUDA_GRAPHS=own).
Where the host is a round's critical path, a round's wall time grows by D; where the device is
(the host waiting for it), by D less the slack. Prints a JSON line per block, then the summary:
each arm's ms of wall time per round (a block's seconds over its rounds, medians of the blocks)
and tok/s.

    python3 bench/gpu-2026-12-07e/host_delay.py ARTIFACT [BLOCKS] [PER] [BACKEND]

BACKEND: ort-cuda (default), or ort-cpu for a dry run of the script's plumbing.
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from cellspec.runtime.dflash import DFlashExecutor  # noqa: E402
from tools.gpu_bench import held_out_prompts, host_probe_ms  # noqa: E402

folder = Path(sys.argv[1])
blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 12
per = int(sys.argv[3]) if len(sys.argv) > 3 else 8
backend = sys.argv[4] if len(sys.argv) > 4 else "ort-cuda"
delay = {"us": 0.0}
speculate = DFlashExecutor.speculate


def delayed(self, items):
    if delay["us"]:
        end = time.perf_counter() + delay["us"] * 1e-6
        while time.perf_counter() < end:
            pass
    return speculate(self, items)


DFlashExecutor.speculate = delayed
arms = ["d0", "d25", "d50", "d100", "d200", "own"]
llms = {}
for arm in ("d0", "own"):
    os.environ["CELLSPEC_CUDA_GRAPHS"] = "own" if arm == "own" else "ort"
    llms[arm] = LLM(folder, backend=backend, max_sessions=8, speculation=True,
                     tree_nodes=15 if backend == "ort-cuda" else None)
prompts = held_out_prompts(blocks * per)
params = SamplingParams(max_tokens=int(os.environ.get("TOKENS", 256)), temperature=0.0, seed=11)
for llm in llms.values():
    llm.generate(prompts[:1], SamplingParams(max_tokens=32, temperature=0.0, seed=11))
per_round = {arm: [] for arm in arms}
totals = {arm: [0, 0.0] for arm in arms}
for block in range(blocks):
    order = arms[block % len(arms):] + arms[:block % len(arms)]
    row, answers = {"block": block, "probe_ms": round(host_probe_ms(), 3)}, {}
    for arm in order:
        llm = llms["own" if arm == "own" else "d0"]
        delay["us"] = 0.0 if arm == "own" else float(arm[1:])
        stats = llm.executor.stats
        rounds, start = stats.rounds, time.perf_counter()
        outs = [
            llm.generate([p], params)[0] for p in prompts[block * per: (block + 1) * per]]
        seconds = time.perf_counter() - start
        answers[arm] = [o.token_ids for o in outs]
        tokens = sum(len(a) for a in answers[arm])
        rounds = stats.rounds - rounds
        per_round[arm].append(1e3 * seconds / rounds)
        totals[arm][0] += tokens
        totals[arm][1] += seconds
        row[arm] = {"ms_per_round": round(1e3 * seconds / rounds, 4), "rounds": rounds}
    row["same"] = all(answers[a] == answers["d0"] for a in arms)
    print(json.dumps(row), flush=True)
base = statistics.median(per_round["d0"])
summary = {arm: {"ms_per_round": round(statistics.median(per_round[arm]), 4),
                 "over_d0_ms": round(statistics.median(per_round[arm]) - base, 4),
                 "tokens_per_s": round(totals[arm][0] / totals[arm][1], 1)} for arm in arms}
print("summary", json.dumps(summary), flush=True)
