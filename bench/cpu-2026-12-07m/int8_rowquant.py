import time, numpy as np, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
shapes = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
L = 30
def nb4(K, N, nm, x, y, inits, nodes):
    bs = 32; w = rng.standard_normal((N, K // bs, bs)).astype(np.float32)
    mn, mx = w.min(-1, keepdims=True), w.max(-1, keepdims=True); sc = (mx - mn) / 15
    zp = np.clip(np.round(-mn / sc), 0, 15); q = np.clip(np.round(w / sc + zp), 0, 15).astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    zpk = zp.reshape(N, K // bs).astype(np.uint8)
    if (K // bs) % 2: zpk = np.concatenate([zpk, np.zeros((N, 1), np.uint8)], 1)
    zpk = (zpk[:, 0::2] | (zpk[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    inits += [nh.from_array(packed, nm), nh.from_array(sc.reshape(-1).astype(np.float32), nm + "s"), nh.from_array(zpk, nm + "z")]
    nodes.append(h.make_node("MatMulNBits", [x, nm, nm + "s", nm + "z"], [y], domain="com.microsoft", K=K, N=N, bits=4, block_size=bs, accuracy_level=4))
def build(kind, wbits):
    nodes, inits, outs = [], [], []
    inits += [nh.from_array(np.array(1/127, np.float32), "inv127"), nh.from_array(np.array([-1], np.int64), "ax"),
              nh.from_array(np.array([128], np.uint8), "c128"), nh.from_array(np.array([1], np.int64), "one")]
    if kind == "q8":
        nodes += [h.make_node("Shape", ["x576"], ["shp"], end=1), h.make_node("Concat", ["shp", "one"], ["shp2"], axis=0),
                  h.make_node("Expand", ["c128", "shp2"], ["zp"])]
    qmax = 2 ** (wbits - 1) - 1
    for l in range(L):
        for i, (K, N) in enumerate(shapes):
            x = f"x{K}" if l == 0 else f"x{K}"; nm = f"w{l}_{i}"; y = f"y{l}_{i}"
            if kind == "nb4":
                nb4(K, N, nm, x, y, inits, nodes)
            else:
                w = rng.standard_normal((K, N)).astype(np.float32); s = np.abs(w).max(0) / qmax
                inits += [nh.from_array(np.round(w / s).astype(np.int8), nm), nh.from_array(s.astype(np.float32), nm + "s")]
                p = f"{nm}_"
                nodes += [h.make_node("Abs", [x], [p+"a"]), h.make_node("ReduceMax", [p+"a", "ax"], [p+"m"], keepdims=1),
                          h.make_node("Mul", [p+"m", "inv127"], [p+"sr"]),
                          h.make_node("QuantizeLinear", [x, p+"sr", "zp"], [p+"q"], axis=1, block_size=K),
                          h.make_node("MatMulInteger", [p+"q", nm, "c128s"], [p+"acc"]),
                          h.make_node("Cast", [p+"acc"], [p+"f"], to=T.FLOAT),
                          h.make_node("Mul", [p+"f", p+"sr"], [p+"g"]),
                          h.make_node("Mul", [p+"g", nm + "s"], [y])]
            outs.append(h.make_tensor_value_info(y, T.FLOAT, None))
    inits.append(nh.from_array(np.array(128, np.uint8), "c128s"))
    ins = [h.make_tensor_value_info(f"x{K}", T.FLOAT, ["M", K]) for K in (576, 1536)]
    return session(h.make_graph(nodes, "g", ins, outs, inits))
def session(graph):
    """A 2-thread CPU session of the graph, without spinning."""
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", 21), h.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
def time_rows(sess):
    """Best of 6 a row count, the sessions interleaved; one line of ms a row count."""
    for M in (1, 2, 4, 8, 16):
        feed = {"x576": rng.standard_normal((M, 576)).astype(np.float32), "x1536": rng.standard_normal((M, 1536)).astype(np.float32)}
        best = {}
        for r in range(6):
            for k, s in sess.items():
                t = time.perf_counter(); s.run(None, feed); best[k] = min(best.get(k, 1e9), time.perf_counter() - t)
        print(M, " ".join(f"{k} {v*1e3:.2f}" for k, v in best.items()), flush=True)
if __name__ == "__main__":
    time_rows({"nb4": build("nb4", 4), "q8w8": build("q8", 8), "q8w7": build("q8", 7)})
