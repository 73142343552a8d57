"""Attribution for int8_blockbatch.py: the batched MatMulInteger alone (int32 outputs, no
scaling or block sum), 3-D int8 weights [K/32, 32, N] against 2-D [K, N] (one block, K=576 whole)."""
import time, numpy as np, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
shapes = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
def build(three_d):
    nodes, inits, outs = [], [], []
    inits.append(nh.from_array(np.array(128, np.uint8), "c128"))
    for l in range(30):
        for i, (K, N) in enumerate(shapes):
            nm = f"w{l}_{i}"
            w = rng.integers(-8, 8, (K // 32, 32, N) if three_d else (K, N)).astype(np.int8)
            inits.append(nh.from_array(w, nm))
            nodes.append(h.make_node("MatMulInteger", [f"x{K}", nm, "c128"], [nm + "y"]))
            outs.append(h.make_tensor_value_info(nm + "y", T.INT32, None))
    shp = (lambda K: ["Kb" + str(K), "M", 32]) if three_d else (lambda K: ["M", K])
    ins = [h.make_tensor_value_info(f"x{K}", T.UINT8, shp(K)) for K in (576, 1536)]
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, inits), opset_imports=[h.make_opsetid("", 21)])
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0"); so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
s3, s2 = build(True), build(False)
for M in (1, 8):
    f3 = {f"x{K}": rng.integers(0, 255, (K // 32, M, 32)).astype(np.uint8) for K in (576, 1536)}
    f2 = {f"x{K}": rng.integers(0, 255, (M, K)).astype(np.uint8) for K in (576, 1536)}
    best = [1e9, 1e9]
    for r in range(6):
        for j, (s, f) in enumerate(((s3, f3), (s2, f2))):
            t = time.perf_counter(); s.run(None, f); best[j] = min(best[j], time.perf_counter() - t)
    print(M, f"3-D batched {best[0]*1e3:.2f} ms, 2-D {best[1]*1e3:.2f} ms", flush=True)
