"""float32 MatMul vs ONNX Runtime's MatMulNBits on SmolLM2's projection shapes, on this CPU.

    python tools/bench_matmulnbits.py [--rows 1,8,128] [--threads 2] [--seconds 1.0]

Weights are the bundled SmolLM2 GGUF's (Q4_1 projections; the Q8_0 embedding as the tied LM
head). A session holds one shape's weights of all 30 layers (fused q/k/v, fused gate/up, down),
each MatMul reading the same x [M, K], so the float32 weights (66-212 MB) stream from memory as
in a decode step instead of sitting in the 32 MB L3; "all" holds every projection of the model.
Each variant is timed side by side with float32 MatMul on the same dequantized W (alternating
bursts, best burst of each) and shown as its time / float32's; float32 ms is per MatMul (best of
its pairings). L0/L4: accuracy_level 0 (float arithmetic) or 4 (x rounded to int8 per block).
"error" is max |y - x @ W^T| / max |x @ W^T| for layer 0 against a float64 product with the
variant's own W: the kernel's arithmetic, not the quantization. A second table gives RTN
reconstruction errors.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

LAYERS = 30


def session(weights: list, accuracy_level: int, threads: int, as_float: bool = False):
    """Every BlockQuantized in `weights` applied to graph input x{K}: MatMulNBits (plus the
    offsets correction), or float32 MatMul on its dequantized W when `as_float`."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from cellspec.export.graph import GraphBuilder, make_linear
    from cellspec.export.quant_graph import initializers, quant_linear

    g = GraphBuilder("bench", accuracy_level=accuracy_level)
    widths = sorted({q.shape[1] for q in weights})
    inputs = {k: g.input(f"x{k}", "float32", ["M", k]) for k in widths}
    arrays = {}
    for i, q in enumerate(weights):
        x = inputs[q.shape[1]]
        if as_float:
            arrays[f"w{i}"] = np.ascontiguousarray(q.dequantize().T)  # [K, N]
            y = make_linear(g, x, f"w{i}", f"/{i}", rank=2)
        else:
            arrays.update(initializers(q, f"w{i}"))
            y = make_linear(g, x, quant_linear(q, f"w{i}"), f"/{i}", rank=2)
        g.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, None))
    for name, array in arrays.items():
        g.weight(numpy_helper.from_array(array, name))
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(g.make_model().SerializeToString(), options,
                                ["CPUExecutionProvider"])


def time_pair(sessions: list, feed: dict, seconds: float) -> list[float]:
    """ms per call of each session, timed in alternating bursts of about 20 ms (the machine is
    shared: both sides see the same load); the best burst of each counts."""
    calls = []
    for sess in sessions:
        start, count = time.perf_counter(), 0
        while time.perf_counter() - start < 0.02:
            sess.run(None, feed)
            count += 1
        calls.append(count)
    best, start, rounds = [float("inf")] * len(sessions), time.perf_counter(), 0
    while rounds < 5 or (rounds < 50 and time.perf_counter() - start < seconds):
        for i, sess in enumerate(sessions):
            tick = time.perf_counter()
            for _ in range(calls[i]):
                sess.run(None, feed)
            best[i] = min(best[i], (time.perf_counter() - tick) / calls[i] * 1e3)
        rounds += 1
    return best


def shapes(blocks: dict) -> dict[str, list]:
    """Shape label -> that projection's BlockQuantized for every layer (Q4_1, q/k/v fused)."""
    from cellspec.export.quant import BlockQuantized

    def fused(i: int, parts: list[str]):
        return BlockQuantized.concat([blocks[f"model.layers.{i}.{p}.weight"] for p in parts])

    attn, mlp = [f"self_attn.{p}_proj" for p in "qkv"], ["mlp.gate_proj", "mlp.up_proj"]
    found = {"qkv 576->960": [fused(i, attn) for i in range(LAYERS)],
             "o 576->576": [fused(i, ["self_attn.o_proj"]) for i in range(LAYERS)],
             "gate_up 576->3072": [fused(i, mlp) for i in range(LAYERS)],
             "down 1536->576": [fused(i, ["mlp.down_proj"]) for i in range(LAYERS)]}
    found["all (30 layers)"] = [q for layers in found.values() for q in layers]
    return found


COLUMNS = ["exact L0", "exact L4", "float zp L0", "RTN L0", "RTN L4"]


def variants(label: str, layers: list) -> list[tuple[str, list, int]]:
    """(column, weights, accuracy_level): GGUF blocks exact (Q4_1: uint8 zero points plus
    offsets; Q8_0: uint8 zero point 128), Q4_1 folded to float zero points, RTN of the same W."""
    from cellspec.export.quant import quantize_rtn

    if label.startswith("lm_head"):
        return [("exact L0", layers, 0), ("exact L4", layers, 4)]
    rtn = [quantize_rtn(q.dequantize()) for q in layers]
    rows = [("exact L0", layers, 0), ("exact L4", layers, 4)]
    if not label.startswith("all"):  # 5-20x slower than float32: shown per shape only
        rows.append(("float zp L0", [q.fold_offsets() for q in layers], 0))
    return rows + [("RTN L0", rtn, 0), ("RTN L4", rtn, 4)]


def bench(args: argparse.Namespace, blocks: dict) -> None:
    """One row per shape and M: float32 ms per MatMul, each variant's time / float32's (timed
    side by side), and the worst level-0 and level-4 errors."""
    rng = np.random.default_rng(0)
    print(f"| shape | M | float32 ms | {' | '.join(COLUMNS)} | error L0 | error L4 |")
    print("|" + " --- |" * (len(COLUMNS) + 5))
    table = {**shapes(blocks), "lm_head 576->49152 (8-bit)": [blocks["model.embed_tokens.weight"]]}
    for label, layers in table.items():
        rows = variants(label, layers)
        reference = session(layers, 0, args.threads, as_float=True)
        sessions = [session(weights, level, args.threads) for _, weights, level in rows]
        for m in args.rows:
            feed = {x.name: rng.standard_normal((m, x.shape[1])).astype(np.float32)
                    for x in reference.get_inputs()}
            ratios, bases, errors = {}, [], {0: 0.0, 4: 0.0}
            for (column, weights, level), sess in zip(rows, sessions):
                ms, base = time_pair([sess, reference], feed, args.seconds)
                ratios[column], bases = f"{ms / base:.2f}", bases + [base / len(layers)]
                errors[level] = max(errors[level], error(sess, feed, weights[0]))
            cells = " | ".join(ratios.get(column, "-") for column in COLUMNS)
            print(f"| {label} | {m} | {min(bases):.3f} | {cells} | {errors[0]:.1e} "
                  f"| {errors[4]:.1e} |", flush=True)


def error(sess, feed: dict, q) -> float:
    x = feed[f"x{q.shape[1]}"]
    y = sess.run(None, feed)[0]
    ref = x.astype(np.float64) @ q.dequantize().T.astype(np.float64)
    return float(np.abs(y - ref).max() / np.abs(ref).max())


def rtn_errors(blocks: dict) -> None:
    """Relative RMS and worst |error| / scale of RTN, uint8 vs float (min/max) zero points."""
    from cellspec.export.quant import quantize_rtn

    # The Q4_1 matrices already sit on a 16-level min/max grid, which float zero points recover
    # exactly; the Q8_0 embedding (256 levels) stands in for trained float weights.
    down = np.concatenate([blocks[f"model.layers.{i}.mlp.down_proj.weight"].dequantize()
                           for i in (0, 15, 29)], axis=1)
    weights = {"random N(0,1) 1024x1024": np.random.default_rng(1).standard_normal(
                   (1024, 1024)).astype(np.float32),
               "SmolLM2 embed_tokens (Q8_0)": blocks["model.embed_tokens.weight"].dequantize(),
               "SmolLM2 down_proj x3 (Q4_1)": down}
    print("\n| weights | bits | rel. RMS error (u8 zp) | max error / scale | "
          "rel. RMS error (float zp, min/max exact) |\n|" + " --- |" * 5)
    for label, w in weights.items():
        for bits in (4, 8):
            q = quantize_rtn(w, bits)
            error = np.abs(q.dequantize() - w).reshape(w.shape[0], -1, 32)
            worst = (error.max(axis=-1) / np.where(q.scales > 0, q.scales, 1)).max()
            print(f"| {label} | {bits} | {rms(error, w):.2e} | {worst:.3f} "
                  f"| {rms(float_zp_rtn(w, bits) - w, w):.2e} |")


def float_zp_rtn(w: np.ndarray, bits: int) -> np.ndarray:
    blocks = w.reshape(w.shape[0], -1, 32)
    lo, hi = blocks.min(-1, keepdims=True), blocks.max(-1, keepdims=True)
    scale = np.where(hi > lo, (hi - lo) / (2**bits - 1), 1)
    return (np.rint((blocks - lo) / scale) * scale + lo).reshape(w.shape)


def rms(error: np.ndarray, w: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(error, dtype=np.float64)) / np.mean(np.square(w))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,8,128", help="M: rows of x")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0, help="per pair of timings")
    args = parser.parse_args()
    args.rows = [int(m) for m in args.rows.split(",")]

    import onnxruntime

    from cellspec.export.gguf import find_bundled_gguf, load_gguf_blocks

    blocks = load_gguf_blocks(find_bundled_gguf())
    print(f"onnxruntime {onnxruntime.__version__}, {args.threads} threads")
    bench(args, blocks)
    rtn_errors(blocks)


if __name__ == "__main__":
    main()
