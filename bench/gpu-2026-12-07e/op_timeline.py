"""Where the gaps between a speculative round's runs go on the device (2026-12-07, sixteenth
sitting): tools/cycle_timeline.py brackets only the engine runs, so a staging copy, a tree kernel,
a commit or a record's copy falls in the "idle before" a run. This brackets every operation the
runtime queues on the device's stream (each engine run, each CudaDevice upload, copy,
download_later, commit, gather, grow_trees, walk_trees, tree_uniforms) with CUDA events, over
trees of 15 on the real SmolLM2 float16 (the shipped draft, held-out prompts one at a time), and
splits each round (a verify's end to the next's) into each kind's device time and the device's
true idle time (between one operation's end and the next's start). Recording the events adds
host time and a little device time a call.

    python3 bench/gpu-2026-12-07e/op_timeline.py ARTIFACT [PROMPTS] [TOKENS]
"""
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from cellspec.runtime import device, device_engine  # noqa: E402
from tools.gpu_bench import held_out_prompts  # noqa: E402

folder = Path(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 16
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 128
llm = LLM(folder, backend="ort-cuda", max_sessions=8, speculation=True, tree_nodes=15)
cuda_device = llm.executor.backend.device
verify_width = llm.executor.tree_nodes + 1
prompts = held_out_prompts(count)
llm.generate(prompts[:1], SamplingParams(max_tokens=16))  # graphs captured
marks: list = []  # (kind, start event, end event), in stream order


def bracket(kind_of, work):
    def bracketed(*args):
        start = cuda_device.cuda.Event()
        start.record(cuda_device.stream)
        result = work(*args)
        end = cuda_device.cuda.Event()
        end.record(cuda_device.stream)
        marks.append((kind_of(args), start, end))
        return result
    return bracketed


def run_kind(args) -> str:
    engine = args[0]
    name = engine.path.name
    if name.startswith("draft_block"):
        return "run block"
    if name.startswith("draft_context"):
        return "run drain"
    if name.startswith("sample"):
        return "run sampler"
    feeds = engine.step_key[0] if engine.step_key else ()
    width = next((shape[-1] for n, shape, _ in feeds if n == "tokens"), None)
    return "run verify" if width == verify_width else "run target"


device_engine.DeviceEngine.run = bracket(run_kind, device_engine.DeviceEngine.run)
for op in ("upload", "copy", "download_later", "commit", "gather", "grow_trees", "walk_trees",
           "tree_uniforms"):
    setattr(device.CudaDevice, op, bracket(lambda args, op=op: op, getattr(device.CudaDevice, op)))
params = SamplingParams(max_tokens=tokens, temperature=0.0, seed=11)
for prompt in prompts:
    llm.generate([prompt], params)
cuda_device.synchronize()
base = marks[0][1]
spans = [(kind, start.time_since(base), end.time_since(base)) for kind, start, end in marks]
ends = [i for i, span in enumerate(spans) if span[0] == "run verify"]
busy: dict[str, list[float]] = {}
calls: dict[str, list[int]] = {}
idle, rounds = [], []
for a, b in zip(ends, ends[1:]):
    inside = spans[a + 1: b + 1]
    kinds = {kind for kind, _, _ in inside}
    if not {"run drain", "run block"} <= kinds or kinds & {"run target", "run sampler"}:
        continue  # a prompt's end and the next one's start
    rounds.append(spans[b][2] - spans[a][2])
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    gap, last_end = 0.0, spans[a][2]
    for kind, start, end in inside:
        totals[kind] = totals.get(kind, 0.0) + (end - start)
        counts[kind] = counts.get(kind, 0) + 1
        gap += max(0.0, start - last_end)
        last_end = max(last_end, end)
    idle.append(gap)
    for kind in totals:
        busy.setdefault(kind, []).append(totals[kind])
        calls.setdefault(kind, []).append(counts[kind])
print(json.dumps({"rounds": len(rounds), "round_ms": round(statistics.median(rounds), 4),
                  "idle_ms": round(statistics.median(idle), 4),
                  "busy_ms": {k: round(statistics.median(v), 4) for k, v in busy.items()},
                  "calls_per_round": {k: statistics.median(v) for k, v in calls.items()}}),
      flush=True)
