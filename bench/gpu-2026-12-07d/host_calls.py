"""(2026-12-07, fifteenth sitting) How much of a speculative round's host time is ONNX Runtime's
`run_with_iobinding` and PyCUDA's kernel launches, timed around each call with perf_counter (no
profiler): the real SmolLM2 float16 on `ort-cuda`, trees of 15, 16 held-out prompts one at a
time, 256-token greedy answers, after a warm-up.

    python3 bench/gpu-2026-12-07d/host_calls.py ARTIFACT
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

import onnxruntime as ort  # noqa: E402
import pycuda.driver as cuda  # noqa: E402

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools.gpu_bench import held_out_prompts, host_probe_ms  # noqa: E402

spent: dict[str, list[float]] = {"ort_run": [], "pycuda_launch": []}


def timed(name, work):
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return work(*args, **kwargs)
        finally:
            spent[name].append(time.perf_counter() - start)
    return call


llm = LLM(Path(sys.argv[1]), backend="ort-cuda", max_sessions=8, speculation=True)
prompts = held_out_prompts(16)
params = SamplingParams(max_tokens=256, temperature=0.0, seed=11)
llm.generate(prompts[:1], SamplingParams(max_tokens=32, temperature=0.0, seed=11))
ort.InferenceSession.run_with_iobinding = timed("ort_run", ort.InferenceSession.run_with_iobinding)
cuda.Function.prepared_async_call = timed("pycuda_launch", cuda.Function.prepared_async_call)
for label in ("timed", "again"):
    for values in spent.values():
        values.clear()
    stats = llm.executor.stats
    rounds, seconds = stats.rounds, stats.seconds.get("round", 0.0)
    probe = host_probe_ms()
    start = time.perf_counter()
    tokens = sum(len(out.token_ids) for out in (llm.generate([p], params)[0] for p in prompts))
    wall = time.perf_counter() - start
    rounds = stats.rounds - rounds
    row = {"pass": label, "probe_ms": round(probe, 2), "tokens": tokens,
           "tokens_per_s": round(tokens / wall, 1), "rounds": rounds,
           "speculate_ms_a_round": round(1e3 * (stats.seconds["round"] - seconds) / rounds, 4)}
    for name, values in spent.items():
        row[name] = {"calls_a_round": round(len(values) / rounds, 2),
                     "us_a_call": round(1e6 * sum(values) / max(1, len(values)), 2),
                     "ms_a_round": round(1e3 * sum(values) / rounds, 4)}
    print(json.dumps(row), flush=True)
