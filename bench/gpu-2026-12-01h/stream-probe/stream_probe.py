"""Probe: ONNX Runtime's CUDA provider on PyCUDA's stream (user_compute_stream), CUDA graphs,
and Run returning before the device is done (disable_synchronize_execution_providers)."""
import json, os, sys, time
from pathlib import Path
import numpy as np
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.getcwd() + "/tools")
import onnxruntime as ort
ort.preload_dlls()
from cellspec.artifact import Manifest
from cellspec.runtime import ort_device
from cellspec.runtime.device import CudaDevice
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling
import gpu_bench

out = Path(os.environ["OUT"]); res = {}
art = gpu_bench.export_shape("A", Path("/tmp/probe-A"), "float16", 1024, 8, None)
manifest = Manifest.load(art)
mode = sys.argv[1]

def backend(user_stream, async_run):
    dev = CudaDevice()
    opts = dict(ort_device.CUDA_PROVIDER_OPTIONS)
    if user_stream:
        opts |= {"has_user_compute_stream": "1", "user_compute_stream": str(dev.stream.handle)}
    b = ort_device.OrtDeviceBackend("ort-cuda", dev, [("CUDAExecutionProvider", opts)],
                                    ort_device.device_limits(manifest, 8),
                                    ort_device.device_policy(manifest), art / "sample.onnx", mode)
    b.async_run = async_run
    return b

orig_options = ort_device.DeviceEngine._options
done = set()
def patched(self, key):
    o = orig_options(self, key)
    if getattr(self, "async_run", False) and id(o) not in done:
        o.add_run_config_entry("disable_synchronize_execution_providers", "1")
        done.add(id(o))
    return o
ort_device.DeviceEngine._options = patched
orig_load = ort_device.OrtDeviceBackend.load_engine
def load(self, path):
    e = orig_load(self, path); e.async_run = getattr(self, "async_run", False); return e
ort_device.OrtDeviceBackend.load_engine = load
orig_run = ort_device.DeviceEngine._run
times = []
def timed(self, session, options):
    t = time.perf_counter(); orig_run(self, session, options); times.append(time.perf_counter() - t)
ort_device.DeviceEngine._run = timed

def decode(ex, steps, sampling):
    rng = np.random.default_rng(0)
    sids = [ex.open_session() for _ in range(2)]
    for s in sids: ex.set_sampling(s, sampling, 3)
    outs = ex.execute([BatchInput(s, tuple(rng.integers(3, 1000, 300).tolist()), 0) for s in sids])
    toks = [[o.token] for o in outs]
    step_t = []
    for _ in range(steps):
        t = time.perf_counter()
        outs = ex.execute([BatchInput(s, (tk[-1],), ex.pos(s)) for s, tk in zip(sids, toks)])
        step_t.append(time.perf_counter() - t)
        for tk, o in zip(toks, outs): tk.append(o.token)
    for s in sids: ex.close_session(s)
    return toks, 1e3 * float(np.median(step_t[5:]))

for sampling in (Sampling(), Sampling(temperature=0.7, top_p=0.9)):
    rows = {}
    for name, us, ar in (("default", False, False), ("user_stream", True, False), ("user_stream_async", True, True)):
        try:
            times.clear()
            ex = Executor.load(art, backend=backend(us, ar), max_sessions=8)
            toks, ms = decode(ex, 40, sampling)
            rows[name] = {"ok": True, "step_ms": ms, "run_return_ms": 1e3 * float(np.median(times[10:])),
                          "graphs": len(ex.target.engine.graph_ids.ids), "tokens": toks}
        except Exception as e:
            rows[name] = {"ok": False, "error": repr(e)[:600]}
        print(name, {k: v for k, v in rows[name].items() if k != "tokens"}, flush=True)
    base = rows["default"].get("tokens")
    for name, r in rows.items():
        if r.get("ok"): r["same_tokens"] = r.pop("tokens") == base
    res[str(sampling.temperature)] = rows
    print(json.dumps({k: {kk: vv for kk, vv in v.items()} for k, v in rows.items()}), flush=True)
(out / f"stream_probe_{mode}.json").write_text(json.dumps(res, indent=1))
