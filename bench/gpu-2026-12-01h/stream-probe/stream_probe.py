"""Probe (2026-12-01, eighth sitting): ONNX Runtime's CUDA provider on PyCUDA's stream
(user_compute_stream), CUDA graphs, and runs that return before the device is done
(disable_synchronize_execution_providers). Decodes 40 steps of 2 sessions on shape A three ways
(the provider's own stream; PyCUDA's; PyCUDA's with runs not waited for) and compares tokens and
times. Run on the GPU machine from the checkout: `python3 stream_probe.py cell|decomposed`, with
$OUT set. The runtime's `in_order` mode (ort_device.py) is what it tried, built. (Tidied after
the run that made the JSON files here, which patched the engines' run options itself.)"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [os.getcwd(), os.getcwd() + "/tools"]


def main() -> None:
    import gpu_bench
    import onnxruntime as ort

    ort.preload_dlls()
    from cellspec.artifact import Manifest
    from cellspec.runtime import ort_device
    from cellspec.runtime.device import CudaDevice
    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import Sampling

    mode = sys.argv[1]
    art = gpu_bench.export_shape("A", Path("/tmp/probe-A"), "float16", 1024, 8, None)
    manifest = Manifest.load(art)
    run_times: list[float] = []
    original_run = ort_device.DeviceEngine._run

    def timed(self, session, options):
        start = time.perf_counter()
        original_run(self, session, options)
        run_times.append(time.perf_counter() - start)

    ort_device.DeviceEngine._run = timed

    def backend(user_stream: bool, async_run: bool):
        device = CudaDevice()
        options = dict(ort_device.CUDA_PROVIDER_OPTIONS)
        if user_stream:
            options |= {"has_user_compute_stream": "1",
                        "user_compute_stream": str(device.stream.handle)}
        made = ort_device.OrtDeviceBackend(
            "ort-cuda", device, [("CUDAExecutionProvider", options)],
            ort_device.device_limits(manifest, 8), ort_device.device_policy(manifest),
            art / "sample.onnx", mode)
        made.in_order = async_run
        return made

    results = {}
    for sampling in (Sampling(), Sampling(temperature=0.7, top_p=0.9)):
        rows = {}
        for name, user_stream, async_run in (("default", False, False),
                                             ("user_stream", True, False),
                                             ("user_stream_async", True, True)):
            run_times.clear()
            executor = Executor.load(art, backend=backend(user_stream, async_run),
                                     max_sessions=8)
            tokens, step_ms = decode(executor, 40, sampling)
            rows[name] = {"step_ms": step_ms,
                          "run_return_ms": 1e3 * float(np.median(run_times[10:])),
                          "graphs": len(executor.target.engine.graph_ids.ids),
                          "tokens": tokens}
        base = rows["default"]["tokens"]
        for row in rows.values():
            row["same_tokens"] = row.pop("tokens") == base
        results[str(sampling.temperature)] = rows
        print(json.dumps(rows), flush=True)
    Path(os.environ["OUT"], f"stream_probe_{mode}.json").write_text(json.dumps(results, indent=1))


def decode(executor, steps: int, sampling) -> tuple[list[list[int]], float]:
    from cellspec.runtime.types import BatchInput

    rng = np.random.default_rng(0)
    sids = [executor.open_session() for _ in range(2)]
    for sid in sids:
        executor.set_sampling(sid, sampling, 3)
    outs = executor.execute([BatchInput(s, tuple(rng.integers(3, 1000, 300).tolist()), 0)
                             for s in sids])
    tokens = [[o.token] for o in outs]
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        outs = executor.execute([BatchInput(s, (t[-1],), executor.pos(s))
                                 for s, t in zip(sids, tokens)])
        times.append(time.perf_counter() - start)
        for t, out in zip(tokens, outs):
            t.append(out.token)
    for sid in sids:
        executor.close_session(sid)
    return tokens, 1e3 * float(np.median(times[5:]))


if __name__ == "__main__":
    main()
