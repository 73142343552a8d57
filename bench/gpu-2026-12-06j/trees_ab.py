"""Trees of 15 against trees of 31 (and plain decoding) on `ort-cuda`, in one process with the arms
interleaved: the real SmolLM2 float16 with the shipped draft, held-out prompts one at a time
(256-token greedy answers), in blocks of PER prompts; each block runs every arm in turn, the order
rotating from block to block, so the host's swings (its Python speed moves by up to 2x within a
process) fall on every arm alike. Trees of 31 verify 32 rows (max_verify_rows 32: the LLM's
default caps a verify at 16 rows, which makes a tree of 31 a tree of 15). Prints a JSON line per
block (each arm's tokens, seconds, round ms, the host probe), then a summary: each arm's tok/s,
its ratio to plain (whole, and the median of the blocks' ratios), tau, and the blocks whose
answers were the same in every arm. Since 2026-12-07 (fifteenth sitting) it also times the
decoding after each prompt's first token (`on_prefill`, as tools/gpu_bench.py's
decode_tokens_per_s): each arm's decode_tokens_per_s and decode_over_plain in the summary,
decode_s in a block's row.

    python3 bench/gpu-2026-12-06j/trees_ab.py ARTIFACT [BLOCKS] [PER] [ARMS] [BACKEND]

ARMS: comma-separated, from plain, t15, t23, t31 (default plain,t15,t31), each optionally with
"@own" (2026-12-07, sixteenth sitting): its engines loaded with CELLSPEC_CUDA_GRAPHS=own (their
static steps launched as CUDA graphs of their own, DeviceEngine.run), the others with "ort"; an
"@own" arm's ratios are to "plain@own" where that is an arm. BACKEND: ort-cuda (default) or
ort-cpu with ARMS plain (a dry run of the script's plumbing).
"""

import json
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools.gpu_bench import held_out_prompts, host_probe_ms  # noqa: E402

folder = Path(sys.argv[1])
blocks = int(sys.argv[2]) if len(sys.argv) > 2 else 8
per = int(sys.argv[3]) if len(sys.argv) > 3 else 8
arms = (sys.argv[4] if len(sys.argv) > 4 else "plain,t15,t31").split(",")
backend = sys.argv[5] if len(sys.argv) > 5 else "ort-cuda"


def first_token(prefilled: list[float], done: int, total: int) -> None:
    if done == total:  # the step that fed the prompt's last token drew the first one
        prefilled.append(time.perf_counter())


def load(arm: str) -> LLM:
    name, _, graphs = arm.partition("@")
    os.environ["CELLSPEC_CUDA_GRAPHS"] = graphs or "ort"  # read as the engines load
    if name == "plain":
        return LLM(folder, backend=backend, max_sessions=8, speculation=False)
    nodes = int(name[1:])
    llm = LLM(folder, backend=backend, max_sessions=8, speculation=True, tree_nodes=nodes)
    llm.executor.max_verify_rows = max(16, nodes + 1)  # one session's tree in one verify
    return llm


def base(arm: str) -> str:
    """The plain arm `arm` is compared with."""
    own = "plain@own"
    return own if arm.endswith("@own") and own in arms else "plain"


llms = {arm: load(arm) for arm in arms}
prompts = held_out_prompts(blocks * per)
params = SamplingParams(max_tokens=256, temperature=0.0, seed=11)
for llm in llms.values():  # graphs captured, first runs done
    llm.generate(prompts[:1], SamplingParams(max_tokens=32, temperature=0.0, seed=11))
totals = {arm: {"tokens": 0, "seconds": 0.0, "cycles": 0, "accepted": 0, "decode_s": 0.0,
               "decode_tokens": 0}
          for arm in arms}
ratios: dict[str, list[float]] = {arm: [] for arm in arms if not arm.startswith("plain")}
same = 0
for block in range(blocks):
    order = arms[block % len(arms):] + arms[:block % len(arms)]
    row, answers = {"block": block, "probe_ms": host_probe_ms()}, {}
    for arm in order:
        llm = llms[arm]
        stats = getattr(llm.executor, "stats", None)
        before = (stats.rounds, stats.seconds.get("round", 0.0), stats.cycles,
                  stats.accepted) if stats else None
        tokens, start, answers[arm] = 0, time.perf_counter(), []
        decode_s, prefilled = 0.0, []
        for prompt in prompts[block * per: (block + 1) * per]:
            prefilled.clear()
            out = llm.generate([prompt], params, on_prefill=partial(first_token, prefilled))[0]
            decode_s += time.perf_counter() - prefilled[-1]
            tokens += len(out.token_ids)
            answers[arm].append(out.token_ids)
        seconds = time.perf_counter() - start
        total = totals[arm]
        total["tokens"] += tokens
        total["seconds"] += seconds
        total["decode_s"] += decode_s
        total["decode_tokens"] += tokens - per
        row[arm] = {"tokens": tokens, "seconds": round(seconds, 4),
                    "decode_s": round(decode_s, 4)}
        if stats:
            rounds = stats.rounds - before[0]
            total["cycles"] += stats.cycles - before[2]
            total["accepted"] += stats.accepted - before[3]
            row[arm]["round_ms"] = round(1e3 * (stats.seconds["round"] - before[1])
                                         / max(1, rounds), 4)
    for arm in ratios:
        if base(arm) in row:
            ratios[arm].append(row[base(arm)]["seconds"] / row[arm]["seconds"])
    same += all(answers[arm] == answers[arms[0]] for arm in arms)
    print(json.dumps(row), flush=True)
summary = {"blocks": blocks, "per": per, "same_answers_blocks": same}
for arm, total in totals.items():
    summary[arm] = {"tokens_per_s": round(total["tokens"] / total["seconds"], 1),
                    "tau": round((total["accepted"] + total["cycles"]) / total["cycles"], 3)
                    if total["cycles"] else None,
                    "decode_tokens_per_s": round(total["decode_tokens"] / total["decode_s"], 1)}
for arm in arms:
    if arm in ratios and base(arm) in summary:
        plain = summary[base(arm)]
        summary[arm]["over_plain"] = round(summary[arm]["tokens_per_s"]
                                           / plain["tokens_per_s"], 3)
        summary[arm]["decode_over_plain"] = round(
            summary[arm]["decode_tokens_per_s"] / plain["decode_tokens_per_s"], 3)
        summary[arm]["median_block_ratio"] = round(statistics.median(ratios[arm]), 3)
for arm in arms:  # an "@own" arm over its "ort" twin
    twin = arm.partition("@")[0]
    if arm.endswith("@own") and twin in summary:
        summary[arm]["over_ort_graphs"] = round(summary[arm]["tokens_per_s"]
                                                / summary[twin]["tokens_per_s"], 3)
        summary[arm]["decode_over_ort_graphs"] = round(
            summary[arm]["decode_tokens_per_s"] / summary[twin]["decode_tokens_per_s"], 3)
print("summary", json.dumps(summary), flush=True)
