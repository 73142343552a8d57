import time, numpy as np, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
shapes = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
L = 30
def build(adt):
    nodes, inits, outs = [], [], []
    for l in range(L):
        for i, (K, N) in enumerate(shapes):
            q = rng.integers(-127, 128, (K, N)).astype(np.int8)
            nm = f"w{l}_{i}"; y = f"y{l}_{i}"
            inits.append(nh.from_array(q, nm))
            ins = [f"a{K}", nm] + (["zp"] if adt == "u8" else [])
            nodes.append(h.make_node("MatMulInteger", ins, [y]))
            outs.append(h.make_tensor_value_info(y, T.INT32, None))
    if adt == "u8": inits.append(nh.from_array(np.array(128, np.uint8), "zp"))
    et = T.UINT8 if adt == "u8" else T.INT8
    ins = [h.make_tensor_value_info(f"a{K}", et, ["M", K]) for K in (576, 1536)]
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, inits), opset_imports=[h.make_opsetid("", 21)])
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
sess = {k: build(k) for k in ("u8", "s8")}
for M in (1, 8):
    best = {}
    for r in range(5):
        for k, s in sess.items():
            dt = np.uint8 if k == "u8" else np.int8
            feed = {f"a{K}": rng.integers(0 if k=="u8" else -127, 128, (M, K)).astype(dt) for K in (576, 1536)}
            t = time.perf_counter(); s.run(None, feed); best[k] = min(best.get(k, 1e9), time.perf_counter() - t)
    print(M, best)
