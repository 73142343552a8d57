"""Which kernels a speculative round and a plain decode step run on the device, and how long each
takes (2026-12-07, seventeenth sitting): torch's profiler (CUPTI, which traces every kernel of
the process, ONNX Runtime's and the CUDA graphs' included) around `LLM.generate` on the real
SmolLM2 float16 with the shipped draft, held-out prompts one at a time; kernels grouped by name,
device microseconds a round (trees of 15) or a step (plain), and launches a round. The next lever
for the round is the verify's kernels (bench/NOTES.md, sixteenth and seventeenth sittings).

    python3 bench/gpu-2026-12-07f/verify_kernels.py ARTIFACT [PROMPTS] [TOKENS] [BACKEND]

BACKEND ort-cpu (with the CPU profiler): a dry run of the plumbing.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools.gpu_bench import held_out_prompts  # noqa: E402

folder = Path(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 4
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
backend = sys.argv[4] if len(sys.argv) > 4 else "ort-cuda"
activity = ProfilerActivity.CUDA if backend == "ort-cuda" else ProfilerActivity.CPU
if backend == "ort-cuda":
    torch.cuda.init()
prompts = held_out_prompts(count + 1)


def device_us(event) -> float:
    for name in ("device_time_total", "cuda_time_total", "self_device_time_total"):
        value = getattr(event, name, None)
        if value:
            return float(value)
    return float(getattr(event, "cpu_time_total", 0.0)) if activity == ProfilerActivity.CPU \
        else 0.0


for arm in ("t15", "plain"):
    trees = {"tree_nodes": 15} if arm != "plain" and backend == "ort-cuda" else {}
    llm = LLM(folder, backend=backend, max_sessions=8, speculation=arm != "plain", **trees)
    params = SamplingParams(max_tokens=tokens)
    llm.generate(prompts[:1], SamplingParams(max_tokens=16))  # graphs captured
    stats = llm.executor.stats if arm != "plain" else None
    rounds0 = stats.rounds if stats else 0
    produced = 0
    with profile(activities=[activity]) as prof:
        for prompt in prompts[1:]:
            out = llm.generate([prompt], params)
            produced += len(out[0].token_ids)
    units = (stats.rounds - rounds0) if stats else produced  # rounds, or decode steps
    rows = []
    for event in prof.key_averages():
        us = device_us(event)
        if us > 0:
            rows.append({"kernel": event.key[:120], "us_per_unit": round(us / units, 3),
                         "launches_per_unit": round(event.count / units, 3)})
    rows.sort(key=lambda r: -r["us_per_unit"])
    total = sum(r["us_per_unit"] for r in rows)
    print(json.dumps({"arm": arm, "units": units, "tokens": produced,
                      "device_us_per_unit": round(total, 1),
                      "launches_per_unit": round(sum(r["launches_per_unit"] for r in rows), 1)}))
    for row in rows[:40]:
        print(json.dumps(row))
    sys.stdout.flush()
    del llm
