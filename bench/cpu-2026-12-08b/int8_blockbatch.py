"""Batched int8 GEMM with activations rounded per row and per block of 32 along K (the rounding
MatMulNBits' accuracy level 4 does), from standard ops: x [M, K] -> [K/32, M, 32] u8 per-block,
MatMulInteger against int8 weights [K/32, 32, N] -> [K/32, M, N] int32, scaled and summed over
blocks. Timed against 4-bit MatMulNBits L4 on the 120 projections of SmolLM2's 30 layers."""
import os, sys, numpy as np
from onnx import helper as h, TensorProto as T, numpy_helper as nh
rng = np.random.default_rng(0)
shapes = [(576, 960), (576, 576), (576, 3072), (1536, 576)]
L = 30
BS = 32
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cpu-2026-12-07m"))
from int8_rowquant import nb4, session, time_rows  # noqa: E402  (its 4-bit builder, session and timing)
def blockq(K, N, nm, y, inits, nodes, pre):
    kb = K // BS
    w = rng.integers(-8, 8, (kb, BS, N)).astype(np.int8)
    s = (rng.random((kb, 1, N)) * 0.1).astype(np.float32)
    inits += [nh.from_array(w, nm), nh.from_array(s, nm + "s")]
    xb, sr = pre[K]
    p = f"{nm}_"
    nodes += [h.make_node("MatMulInteger", [xb, nm, "c128s"], [p + "acc"]),
              h.make_node("Cast", [p + "acc"], [p + "f"], to=T.FLOAT),
              h.make_node("Mul", [p + "f", sr], [p + "g"]),
              h.make_node("Mul", [p + "g", nm + "s"], [p + "h"]),
              h.make_node("ReduceSum", [p + "h", "ax0"], [y], keepdims=0)]
def quant(K, nodes):
    """x [M, K] -> (u8 [Kb, M, 32], scales [Kb, M, 1]); shared by the projections reading x."""
    x = f"x{K}"; p = f"q{K}_"
    nodes += [h.make_node("Reshape", [x, f"shape{K}"], [p + "r"]),
              h.make_node("Transpose", [p + "r"], [p + "t"], perm=[1, 0, 2]),
              h.make_node("Abs", [p + "t"], [p + "a"]),
              h.make_node("ReduceMax", [p + "a", "axm1"], [p + "m"], keepdims=1),
              h.make_node("Mul", [p + "m", "inv127"], [p + "sr"]),
              h.make_node("Shape", [p + "sr"], [p + "ss"]),
              h.make_node("Expand", ["c128s", p + "ss"], [p + "zp"]),  # zero point 128, shaped like the scales
              h.make_node("QuantizeLinear", [p + "t", p + "sr", p + "zp"], [p + "q"], axis=2, block_size=BS),
              ]
    return p + "q", p + "sr"
def build(kind):
    nodes, inits, outs = [], [], []
    inits += [nh.from_array(np.array(1 / 127, np.float32), "inv127"), nh.from_array(np.array([-1], np.int64), "axm1"),
              nh.from_array(np.array([0], np.int64), "ax0"), nh.from_array(np.array(128, np.uint8), "c128s")]
    pre = {}
    if kind == "blk":
        for K in (576, 1536):
            inits.append(nh.from_array(np.array([0, K // BS, BS], np.int64), f"shape{K}"))
            pre[K] = quant(K, nodes)
    for l in range(L):
        for i, (K, N) in enumerate(shapes):
            nm = f"w{l}_{i}"; y = f"y{l}_{i}"
            if kind == "nb4":
                nb4(K, N, nm, f"x{K}", y, inits, nodes)
            else:
                blockq(K, N, nm, y, inits, nodes, pre)
            outs.append(h.make_tensor_value_info(y, T.FLOAT, None))
    ins = [h.make_tensor_value_info(f"x{K}", T.FLOAT, ["M", K]) for K in (576, 1536)]
    return session(h.make_graph(nodes, "g", ins, outs, inits))
time_rows({"nb4": build("nb4"), "blk8": build("blk")})
