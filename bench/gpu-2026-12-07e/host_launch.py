"""Host microseconds a call: ONNX Runtime's run (replaying its own graph) against the launch of
an own graph (CELLSPEC_CUDA_GRAPHS=own), per engine, over trees of 15 on 16 held-out prompts.

    python3 bench/gpu-2026-12-07e/host_launch.py ARTIFACT
"""
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from cellspec.runtime import device, device_engine  # noqa: E402
from tools.gpu_bench import held_out_prompts  # noqa: E402

folder = Path(sys.argv[1])
times: dict = defaultdict(list)
run, launch = device_engine.DeviceEngine._run, device.CudaGraph.launch
current = {"engine": None}


def timed_run(self, session, options):
    start = time.perf_counter()
    run(self, session, options)
    times[(os.environ["CELLSPEC_CUDA_GRAPHS"], self.path.name, "ort run")].append(
        time.perf_counter() - start)


def timed_launch(self):
    start = time.perf_counter()
    launch(self)
    key = (os.environ["CELLSPEC_CUDA_GRAPHS"], f"graph of {self.nodes} nodes", "own launch")
    times[key].append(time.perf_counter() - start)


device_engine.DeviceEngine._run = timed_run
device.CudaGraph.launch = timed_launch
prompts = held_out_prompts(16)
params = SamplingParams(max_tokens=128, temperature=0.0, seed=11)
for mode in ("ort", "own", "ort", "own"):
    os.environ["CELLSPEC_CUDA_GRAPHS"] = mode
    llm = LLM(folder, backend="ort-cuda", max_sessions=8, speculation=True, tree_nodes=15)
    llm.generate(prompts[:1], params)
    times.clear()
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    rows = {" / ".join(k[1:]): [len(v), round(1e6 * sorted(v)[len(v) // 2], 1),
                                round(1e6 * sum(v) / len(v), 1)]
            for k, v in sorted(times.items())}
    print(json.dumps({"mode": mode, "tokens_per_s": round(sum(len(o.token_ids) for o in outs)
                                                          / seconds, 1),
                      "rounds": llm.executor.stats.rounds,
                      "calls [count, median us, mean us]": rows}), flush=True)
