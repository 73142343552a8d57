"""Probe (2026-12-06, eighth sitting): can a whole DFlash round's device work be one CUDA graph
that the host launches with one call, instead of about 30 PyCUDA and ONNX Runtime calls?

A round runs ONNX Runtime sessions (the draft block, the verify) and PyCUDA kernels and copies on
one stream (`user_compute_stream`). This captures such a sequence with the driver's stream
capture (ctypes on libcuda, relaxed mode) around ONNX Runtime's own `run_with_iobinding` calls
(uncaptured by ONNX Runtime: no `gpu_graph_id`), instantiates it and replays it; then checks the
replay's outputs against the same calls run directly, and times the host's side of both forms
and of ONNX Runtime's own graph replay (`gpu_graph_id`).

Two float16 graphs of SmolLM2's width (576): "block" (4 MatMuls) and "verify" (8 MatMuls, then
ArgMax), the verify reading the block's output through a device-to-device copy, all bound by
address. Prints JSON lines.
"""

from __future__ import annotations

import ctypes
import json
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def graph(name: str, layers: int, argmax: bool) -> bytes:
    rng = np.random.default_rng(len(name))
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((576, 576)) * 0.04).astype(np.float16)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"h{i}"]))
        nodes.append(helper.make_node("Tanh", [f"h{i}"], [f"t{i}"]))
        x = f"t{i}"
    outputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT16, [16, 576])]
    if argmax:
        nodes.append(helper.make_node("ArgMax", [x], ["ids"], axis=1, keepdims=0))
        outputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [16])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT16,
                                                                      [16, 576])],
                          outputs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def main() -> None:
    import onnxruntime as ort
    import pycuda.driver as cuda

    ort.preload_dlls()
    cuda.init()
    context = cuda.Device(0).retain_primary_context()
    context.push()
    stream = cuda.Stream()
    libcuda = ctypes.CDLL("libcuda.so.1")
    options = {"device_id": "0", "has_user_compute_stream": "1",
               "user_compute_stream": str(stream.handle)}
    sessions = {name: ort.InferenceSession(graph(name, layers, name == "verify"),
                                           providers=[("CUDAExecutionProvider", options)])
                for name, layers in (("block", 4), ("verify", 8))}
    x = cuda.mem_alloc(16 * 576 * 2)
    block_out, verify_in = cuda.mem_alloc(16 * 576 * 2), cuda.mem_alloc(16 * 576 * 2)
    ids = cuda.mem_alloc(16 * 8)
    host_x = cuda.pagelocked_empty(16 * 576, np.float16)
    host_x[:] = np.random.default_rng(0).standard_normal(16 * 576).astype(np.float16)
    bindings = {}
    for name, session in sessions.items():
        b = session.io_binding()
        if name == "block":
            b.bind_input("x", "cuda", 0, np.float16, [16, 576], int(x))
            b.bind_output("t3", "cuda", 0, np.float16, [16, 576], int(block_out))
        else:
            b.bind_input("x", "cuda", 0, np.float16, [16, 576], int(verify_in))
            b.bind_output("ids", "cuda", 0, np.int64, [16], int(ids))
        bindings[name] = b
    plain = ort.RunOptions()
    plain.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def round_calls() -> None:
        cuda.memcpy_htod_async(x, host_x, stream)
        sessions["block"].run_with_iobinding(bindings["block"], plain)
        cuda.memcpy_dtod_async(verify_in, block_out, 16 * 576 * 2, stream)
        sessions["verify"].run_with_iobinding(bindings["verify"], plain)

    def result() -> np.ndarray:
        out = np.empty(16, np.int64)
        cuda.memcpy_dtoh(out, ids)
        return out

    for _ in range(3):
        round_calls()
    stream.synchronize()
    direct = result()
    cuda.memset_d8(ids, 0, 16 * 8)

    graph_handle, exec_handle = ctypes.c_void_p(), ctypes.c_void_p()
    report = {"capture": None}
    status = libcuda.cuStreamBeginCapture_v2(ctypes.c_void_p(stream.handle), 2)  # relaxed
    try:
        round_calls()
    except Exception as error:  # ONNX Runtime refused something under capture
        report["capture"] = f"run failed under capture: {error}"
    end = libcuda.cuStreamEndCapture(ctypes.c_void_p(stream.handle), ctypes.byref(graph_handle))
    report |= {"begin_status": status, "end_status": end}
    if report["capture"] is None and status == 0 and end == 0:
        inst = libcuda.cuGraphInstantiateWithFlags(ctypes.byref(exec_handle), graph_handle, 0)
        count = ctypes.c_size_t()
        libcuda.cuGraphGetNodes(graph_handle, None, ctypes.byref(count))
        report |= {"instantiate_status": inst, "graph_nodes": count.value}
        launch = libcuda.cuGraphLaunch(exec_handle, ctypes.c_void_p(stream.handle))
        stream.synchronize()
        replayed = result()
        report |= {"launch_status": launch, "same_ids": bool(np.array_equal(replayed, direct)),
                   "ids": replayed[:4].tolist()}
        report["capture"] = "ok" if launch == 0 and report["same_ids"] else "replay differs"
    print(json.dumps(report), flush=True)

    # host microseconds a round: the direct calls, one graph launch, ONNX Runtime's own graphs
    def host_us(work, n: int = 300) -> float:
        best = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(n):
                work()
            best.append((time.perf_counter() - start) / n * 1e6)
            stream.synchronize()
        return min(best)

    timings = {"direct_round_us": host_us(round_calls)}
    if report["capture"] == "ok":
        handle = ctypes.c_void_p(stream.handle)
        timings["graph_launch_us"] = host_us(lambda: libcuda.cuGraphLaunch(exec_handle, handle))
    own = ort.RunOptions()
    own.add_run_config_entry("disable_synchronize_execution_providers", "1")
    own.add_run_config_entry("gpu_graph_id", "1")
    graphed = {name: ort.InferenceSession(graph(name, layers, name == "verify"),
                                          providers=[("CUDAExecutionProvider",
                                                      options | {"enable_cuda_graph": "1"})])
               for name, layers in (("block", 4), ("verify", 8))}
    for _ in range(3):
        graphed["verify"].run_with_iobinding(bindings_for(graphed["verify"], verify_in, ids), own)
    binding = bindings_for(graphed["verify"], verify_in, ids)
    graphed["verify"].run_with_iobinding(binding, own)
    timings["ort_graph_run_us"] = host_us(
        lambda: graphed["verify"].run_with_iobinding(binding, own))
    timings["ort_plain_run_us"] = host_us(
        lambda: sessions["verify"].run_with_iobinding(bindings["verify"], plain))
    timings["pycuda_dtod_us"] = host_us(
        lambda: cuda.memcpy_dtod_async(verify_in, block_out, 16 * 576 * 2, stream))
    event = cuda.Event()
    timings["pycuda_event_record_us"] = host_us(lambda: event.record(stream))
    stream.synchronize()
    print(json.dumps(timings), flush=True)
    context.pop()


def bindings_for(session, x, ids):
    b = session.io_binding()
    b.bind_input("x", "cuda", 0, np.float16, [16, 576], int(x))
    b.bind_output("ids", "cuda", 0, np.int64, [16], int(ids))
    return b


if __name__ == "__main__":
    main()
