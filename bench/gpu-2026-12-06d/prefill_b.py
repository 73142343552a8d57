"""A large model's prompts under each attention mode (2026-12-06, fourth sitting): shape B (8
Qwen3-8B-shaped layers, random float16 weights, `tools/gpu_bench.py`'s export), one session,
run with CELLSPEC_CUDA_ATTENTION set to the mode under test.

    python3 bench/gpu-2026-12-06d/prefill_b.py WORK LABEL >> OUT.jsonl

Prints one JSON line per prompt length: the time to feed a prompt of that many random tokens
in pieces of 256 (the dynamic width, as LLM's prefill cuts them) and draw its first token,
median and best of 5 after a warm-up; and one line with the median time of 32 one-token
decode steps after a 1,024-token prompt (one `execute` a step, the token on the host).
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path.cwd()))

from cellspec.runtime.executor import Executor  # noqa: E402
from cellspec.runtime.types import BatchInput, Sampling  # noqa: E402
from tools.gpu_bench import host_probe_ms, shape_artifact  # noqa: E402

work, label = Path(sys.argv[1]), sys.argv[2]
backend = sys.argv[3] if len(sys.argv) > 3 else "ort-cuda"  # ort-cpu with shape D: a dry run
shape = os.environ.get("SHAPE", "B")
mode = os.environ.get("CELLSPEC_CUDA_ATTENTION", "(unset)")
folder = shape_artifact(shape, SimpleNamespace(work=work, dtype="float16" if backend == "ort-cuda"
                                               else "float32", context=2048), 1)
executor = Executor.load(folder, backend=backend, max_sessions=1)
rng = np.random.default_rng(0)
PIECE = 256


def prompt(length: int) -> float:
    """Seconds to feed `length` tokens to a fresh session and draw the first token."""
    sid = executor.open_session()
    executor.set_sampling(sid, Sampling(), 1)
    ids = rng.integers(3, 1000, length).tolist()
    start = time.perf_counter()
    for at in range(0, length, PIECE):
        piece = tuple(ids[at: at + PIECE])
        out = executor.execute([BatchInput(sid, piece, at, at + PIECE >= length)])
    seconds = time.perf_counter() - start
    assert out and out[0].tokens
    executor.close_session(sid)
    return seconds


for length in (256, 1024, 2000):
    prompt(length)
    times = [prompt(length) for _ in range(5)]
    print(json.dumps({"label": label, "mode": mode, "shape": shape, "kind": "prompt",
                      "tokens": length, "ms": 1e3 * statistics.median(times),
                      "best_ms": 1e3 * min(times), "probe_ms": host_probe_ms()}), flush=True)

sid = executor.open_session()
executor.set_sampling(sid, Sampling(), 1)
ids = rng.integers(3, 1000, 1024).tolist()
for at in range(0, 1024, PIECE):
    out = executor.execute([BatchInput(sid, tuple(ids[at: at + PIECE]), at, at + PIECE >= 1024)])
token, position, steps = out[0].tokens[-1], 1024, []
for _ in range(40):
    start = time.perf_counter()
    token = executor.execute([BatchInput(sid, (token,), position)])[0].tokens[-1]
    steps.append(time.perf_counter() - start)
    position += 1
print(json.dumps({"label": label, "mode": mode, "shape": shape, "kind": "decode",
                  "context": 1024, "ms": 1e3 * statistics.median(steps[8:]),
                  "best_ms": 1e3 * min(steps[8:]), "probe_ms": host_probe_ms()}), flush=True)
