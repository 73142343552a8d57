"""The other standard-op form of per-block activation rounding: each token's K/32 blocks as
separate rows of a 2-D u8 activation matrix (zero point elsewhere), one MatMulInteger against
prepacked 2-D int8 weights [K, N]: K/32 rows a token (18 for K=576, 48 for K=1536). The GEMM
alone (int32 out, before any scaling or block sum), against 4-bit MatMulNBits L4 at the same
token count; the 120 projections of SmolLM2's 30 layers."""
import time, numpy as np, onnxruntime as ort
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
shapes = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
def build():
    nodes, inits, outs = [], [], []
    inits.append(nh.from_array(np.array(128, np.uint8), "c128"))
    for l in range(30):
        for i, (K, N) in enumerate(shapes):
            nm = f"w{l}_{i}"
            inits.append(nh.from_array(rng.integers(-8, 8, (K, N)).astype(np.int8), nm))
            nodes.append(h.make_node("MatMulInteger", [f"x{K}", nm, "c128"], [nm + "y"]))
            outs.append(h.make_tensor_value_info(nm + "y", T.INT32, None))
    ins = [h.make_tensor_value_info(f"x{K}", T.UINT8, ["M", K]) for K in (576, 1536)]
    m = h.make_model(h.make_graph(nodes, "g", ins, outs, inits), opset_imports=[h.make_opsetid("", 21)])
    so = ort.SessionOptions(); so.intra_op_num_threads = 2
    so.add_session_config_entry("session.intra_op.allow_spinning", "0"); so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
s = build()
for tokens in (1, 2, 4, 8):
    f = {f"x{K}": rng.integers(0, 255, (tokens * K // 32, K)).astype(np.uint8) for K in (576, 1536)}
    best = 1e9
    for r in range(6):
        t = time.perf_counter(); s.run(None, f); best = min(best, time.perf_counter() - t)
    print(f"{tokens} tokens ({tokens * 18} / {tokens * 48} rows): {best*1e3:.2f} ms", flush=True)
