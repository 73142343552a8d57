import time, numpy as np, onnx, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
shapes = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
L = 30
def build(kind):
    nodes, inits, outs = [], [], []
    for l in range(L):
        for i, (K, N) in enumerate(shapes):
            w = rng.standard_normal((K, N)).astype(np.float32)
            nm = f"w{l}_{i}"
            if kind == "f32":
                inits.append(nh.from_array(w, nm)); nodes.append(h.make_node("MatMul", [f"x{K}", nm], [f"y{l}_{i}"]))
            elif kind == "dq8":
                s = np.abs(w).max(0) / 127
                q = np.clip(np.round(w / s), -127, 127).astype(np.int8)
                inits += [nh.from_array(q, nm), nh.from_array(s.astype(np.float32), nm + "s"), nh.from_array(np.zeros(N, np.int8), nm + "z")]
                nodes.append(h.make_node("DynamicQuantizeMatMul", [f"x{K}", nm, nm + "s", nm + "z"], [f"y{l}_{i}"], domain="com.microsoft"))
            elif kind.startswith("nb"):
                bits = 4 if kind == "nb4" else 8
                bs = 32
                wt = w.T.reshape(N, K // bs, bs)
                mn, mx = wt.min(-1, keepdims=True), wt.max(-1, keepdims=True)
                qmax = 2**bits - 1
                sc = (mx - mn) / qmax; zp = np.clip(np.round(-mn / sc), 0, qmax)
                q = np.clip(np.round(wt / sc + zp), 0, qmax).astype(np.uint8)
                if bits == 4:
                    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
                    zpk = zp.reshape(N, K // bs).astype(np.uint8)
                    if (K // bs) % 2: zpk = np.concatenate([zpk, np.zeros((N, 1), np.uint8)], 1)
                    zpk = (zpk[:, 0::2] | (zpk[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
                else:
                    packed = q; zpk = zp.reshape(-1).astype(np.uint8)
                inits += [nh.from_array(packed, nm), nh.from_array(sc.reshape(-1).astype(np.float32), nm + "s"), nh.from_array(zpk, nm + "z")]
                nodes.append(h.make_node("MatMulNBits", [f"x{K}", nm, nm + "s", nm + "z"], [f"y{l}_{i}"], domain="com.microsoft", K=K, N=N, bits=bits, block_size=bs, accuracy_level=4))
            outs.append(h.make_tensor_value_info(f"y{l}_{i}", T.FLOAT, None))
    ins = [h.make_tensor_value_info(f"x{K}", T.FLOAT, ["M", K]) for K in (576, 1536)]
    g = h.make_graph(nodes, "g", ins, outs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
kinds = ["f32", "nb4", "nb8", "dq8"]
sess = {k: build(k) for k in kinds}
for M in (1, 2, 4, 8, 16):
    feed = {"x576": rng.standard_normal((M, 576)).astype(np.float32), "x1536": rng.standard_normal((M, 1536)).astype(np.float32)}
    best = {k: 1e9 for k in kinds}
    for r in range(6):
        for k in kinds:
            t = time.perf_counter(); sess[k].run(None, feed); best[k] = min(best[k], time.perf_counter() - t)
    print(M, " ".join(f"{k} {best[k]*1e3:.2f}ms" for k in kinds), flush=True)
