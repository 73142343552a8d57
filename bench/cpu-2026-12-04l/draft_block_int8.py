"""The draft block alone on ort-cpu: float32 layers (as exported) against the layers' MatMuls as
8-bit MatMulNBits (RTN, symmetric blocks of 32, accuracy level 4): time and proposals."""
import sys, time
import numpy as np, onnx, onnxruntime as ort
from onnx import helper, numpy_helper

A = sys.argv[1]
model = onnx.load(A + "draft_block.onnx")  # with weights
inits = {i.name: i for i in model.graph.initializer}

def quantized(model, bits=8, level=4):
    m = onnx.ModelProto(); m.CopyFrom(model)
    names = {i.name: i for i in m.graph.initializer}
    nodes, new_inits, gone = [], [], set()
    for n in m.graph.node:
        w = names.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
        if w is None or len(w.dims) != 2:
            nodes.append(n); continue
        wt = numpy_helper.to_array(w)  # [K, N]
        K, N = wt.shape
        W = wt.T.reshape(N, K // 32, 32)
        scale = np.abs(W).max(-1) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.rint(W / scale[..., None]), -127, 127).astype(np.int16) + 128
        new_inits += [numpy_helper.from_array(q.astype(np.uint8), w.name + "/q"),
                      numpy_helper.from_array(scale.astype(np.float32).reshape(-1), w.name + "/s")]
        gone.add(w.name)
        nodes.append(helper.make_node("MatMulNBits", [n.input[0], w.name + "/q", w.name + "/s"],
                                      list(n.output), name=n.name, domain="com.microsoft", K=K, N=N,
                                      bits=bits, block_size=32, accuracy_level=level))
    del m.graph.node[:]; m.graph.node.extend(nodes)
    keep = [i for i in m.graph.initializer if i.name not in gone]
    del m.graph.initializer[:]; m.graph.initializer.extend(keep + new_inits)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m

def session(m):
    o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), o, providers=["CPUExecutionProvider"])

rng = np.random.default_rng(0)
Ncells = 256
feeds = {"tokens": rng.integers(3, 1000, (1, 16)), "positions": (np.arange(16) + Ncells)[None],
         "cell_table": np.arange(Ncells)[None], "attn_mask": np.ones((1, 1, 16, Ncells + 16), bool),
         "proposal_rows": np.arange(1, 8)}
for k in ("k_pool.0", "v_pool.0", "k_pool.1", "v_pool.1"):
    feeds[k] = (rng.standard_normal((8192, 192)) * 0.5).astype(np.float32)
feeds = {k: (v.astype(np.int64) if v.dtype.kind == "i" else v) for k, v in feeds.items()}
sessions = {"float32": session(model), "int8": session(quantized(model))}
outs = {k: s.run(None, feeds) for k, s in sessions.items()}
print("proposals", outs["float32"][1], outs["int8"][1])
print("max |logit diff|", float(np.abs(outs["float32"][0] - outs["int8"][0]).max()))
times = {k: [] for k in sessions}
for r in range(6):
    for k, s in sessions.items():
        t = time.perf_counter()
        for _ in range(50): s.run(None, feeds)
        times[k].append((time.perf_counter() - t) / 50 * 1e3)
for k, v in times.items(): print(k, "ms", [round(x, 3) for x in v], "median", round(float(np.median(v)), 3))
o = ort.SessionOptions(); o.intra_op_num_threads = 2; o.log_severity_level = 3; o.enable_profiling = True
o.profile_file_prefix = "/tmp/dq/prof"
s = ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])
for _ in range(60): s.run(None, feeds)
import json, collections
prof = json.load(open(s.end_profiling()))
agg = collections.Counter(); cnt = collections.Counter()
for e in prof:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        agg[e["args"]["op_name"]] += e["dur"]; cnt[e["args"]["op_name"]] += 1
tot = sum(agg.values())
for k, v in agg.most_common(14): print(f"{k:32s} {v/60/1e3:7.3f} ms  {cnt[k]//60} nodes")
print("total", tot / 60 / 1e3)
