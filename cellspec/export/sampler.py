"""The sampler and verifier graphs: small float32 ONNX graphs that run wherever the logits are.

Each graph reproduces the host rule of `cellspec.runtime.sampling` (its module docstring) with
standard opset-21 ops (TopK, CumSum, ArgMax, GatherElements, Where, ...):

- `argmax`: logits [R, V] -> tokens [R], the lowest id among the maximal logits.
- `sample`: logits [R, V], params [R, 4] (temperature, top_p, top_k, uniform) -> tokens [R].
- `verify_argmax`: logits [O, W, V], candidates [O, W] (anchor, d1..d{W-1}) -> verdict [O, 2]
  (accepted count, next token), the targets by argmax.
- `verify`: as verify_argmax with params [O, 3 + W] (temperature, top_p, top_k, then one uniform
  per position j = 0..W-1); row j's target is what `sample` draws with uniform j.

The vocabulary order relies on TopK's tie rule (ONNX: the lower index first), the host's "ties:
lower id first". exp(z - z_max) and its sum are computed in float64 and rounded to float32, so they
do not depend on the backend's float32 exp; the one cumulative sum is sequential float32, bit-equal
to numpy's on ORT CPU (and to cellspec's SequentialCumSum, which `ort-cuda` runs in its place with
CellAttention). Draws can still differ from the host where u or top_p sits within float32
rounding of a boundary (numpy's float32 exp and pairwise sum round differently).
TensorRT's TopK caps k at 3840, so the full-vocabulary sort of `sample` and `verify` does not
build as a TensorRT engine: run those two on ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from cellspec.artifact import LOGITS, TOKENS
from cellspec.export.graph import GraphBuilder

PARAMS = "params"  # float32 [R, 4] (sample) or [O, 3 + W] (verify)
CANDIDATES = "candidates"  # int64 [O, W]: anchor, d1..d{W-1}
VERDICT = "verdict"  # int64 [O, 2]: accepted count, next token
GRAPH_FILES = {
    "argmax": "argmax.onnx",
    "sample": "sample.onnx",
    "verify_argmax": "verify_argmax.onnx",
    "verify": "verify.onnx",
}
_END = int(np.iinfo(np.int64).max)  # Slice end meaning "to the end"


def _columns(g: GraphBuilder, x: str, start: int, end: int, name: str) -> str:
    """x[:, start:end]."""
    return g.node("Slice", [x, g.const([start]), g.const([end]), g.const([1])], name=name)


def _emit_sample(g: GraphBuilder, logits: str, temperature: str, top_p: str, top_k: str,
                 uniform: str, vocab_size: int, name: str) -> str:
    """logits [R, V]; temperature, top_p, top_k, uniform [R, 1] float32 -> tokens [R, 1] int64.

    The sampling rule of cellspec.runtime.sampling, step by step in the same float32 ops."""
    one = g.const(1.0, "float32")
    is_greedy = g.node("Equal", [temperature, g.const(0.0, "float32")], name=f"{name}/is_greedy")
    safe_t = g.node("Where", [is_greedy, one, temperature], name=f"{name}/safe_temperature")
    z = g.node("Div", [logits, safe_t], name=f"{name}/scaled")
    # the vocabulary by z descending, ties by lower id (TopK's tiebreak): values, order [R, V]
    values, order = f"{name}/sort/values", f"{name}/sort/order"
    g.node("TopK", [z, g.const([vocab_size])], name=f"{name}/sort", outputs=[values, order],
           axis=-1, largest=1, sorted=1)
    rank = g.node("Range", [g.const(0), g.const(vocab_size), g.const(1)], name=f"{name}/rank")
    probs, keep_k = _emit_top_k_probs(g, values, rank, top_k, vocab_size, name)
    cumsum = g.node("CumSum", [probs, g.const(1)], name=f"{name}/cumsum")
    keep = _emit_top_p_keep(g, probs, cumsum, keep_k, rank, top_p, name)
    index = _emit_inverse_cdf(g, cumsum, keep, rank, uniform, name)
    sampled = g.node("GatherElements", [order, index], name=f"{name}/sampled", axis=1)
    greedy = g.node("ArgMax", [logits], name=f"{name}/greedy", axis=1, keepdims=1,
                    select_last_index=0)
    return g.node("Where", [is_greedy, greedy, sampled], name=f"{name}/token")


def _emit_top_k_probs(g: GraphBuilder, values: str, rank: str, top_k: str, vocab_size: int,
                      name: str) -> tuple[str, str]:
    """values [R, V] sorted descending -> (p [R, V], keep_k [R, V]): ranks < top_k survive (0 or
    > V: all); p = exp(z - z_max) / sum over them, 0 elsewhere. exp and the sum are computed in
    float64 and rounded to float32: correctly rounded, whatever the backend's float32 exp."""
    k = g.node("Cast", [top_k], name=f"{name}/k", to=TensorProto.INT64)
    k_off = g.node("Or", [g.node("LessOrEqual", [k, g.const(0)], name=f"{name}/k_zero"),
                          g.node("Greater", [k, g.const(vocab_size)], name=f"{name}/k_big")],
                   name=f"{name}/k_off")
    k = g.node("Where", [k_off, g.const(vocab_size), k], name=f"{name}/k_eff")
    keep_k = g.node("Less", [rank, k], name=f"{name}/keep_k")
    shifted = g.node("Sub", [values, _columns(g, values, 0, 1, f"{name}/z_max")],
                     name=f"{name}/shifted")
    shifted = g.node("Cast", [shifted], name=f"{name}/shifted_f64", to=TensorProto.DOUBLE)
    exp = g.node("Cast", [g.node("Exp", [shifted], name=f"{name}/exp_f64")],
                 name=f"{name}/exp", to=TensorProto.FLOAT)
    exp = g.node("Where", [keep_k, exp, g.const(0.0, "float32")], name=f"{name}/exp_kept")
    exp_f64 = g.node("Cast", [exp], name=f"{name}/exp_kept_f64", to=TensorProto.DOUBLE)
    total = g.node("ReduceSum", [exp_f64, g.const([1])], name=f"{name}/total_f64", keepdims=1)
    total = g.node("Cast", [total], name=f"{name}/total", to=TensorProto.FLOAT)
    return g.node("Div", [exp, total], name=f"{name}/probs"), keep_k


def _emit_top_p_keep(g: GraphBuilder, probs: str, cumsum: str, keep_k: str, rank: str,
                     top_p: str, name: str) -> str:
    """keep [R, V]: rank j survives top_k and (j == 0 or cumsum(p)_j - p_j < top_p), the
    exclusive mass computed as the host does."""
    exclusive = g.node("Sub", [cumsum, probs], name=f"{name}/exclusive")
    is_first = g.node("Equal", [rank, g.const(0)], name=f"{name}/is_first")
    keep_p = g.node("Or", [g.node("Less", [exclusive, top_p], name=f"{name}/below_p"), is_first],
                    name=f"{name}/keep_p")
    return g.node("And", [keep_k, keep_p], name=f"{name}/keep")


def _emit_inverse_cdf(g: GraphBuilder, cumsum: str, keep: str, rank: str, uniform: str,
                      name: str) -> str:
    """The rank drawn [R, 1]: the first kept rank whose cdf > u * (kept mass), else the last
    kept rank. The kept ranks are a prefix: the exclusive sums never decrease (for q <= p,
    fl(fl(c + q) - q) >= fl(c - p), fl being monotone), so the cdf over the kept p is the
    cumulative sum itself up to the last kept rank, and the kept mass its value there, as the
    host's cdf[-1]. (No ReduceMax over the vocabulary: cuDNN's, which the CUDA provider calls,
    takes 2.7 ms for 8 rows of 49,152.)"""
    # the last kept rank: argmax of keep * rank (ranks are exact in float32 below 2**24)
    keep_f = g.node("Cast", [keep], name=f"{name}/keep_f", to=TensorProto.FLOAT)
    rank_f = g.node("Cast", [rank], name=f"{name}/rank_f", to=TensorProto.FLOAT)
    kept_rank = g.node("Mul", [keep_f, rank_f], name=f"{name}/kept_rank")
    last_kept = g.node("ArgMax", [kept_rank], name=f"{name}/last_kept", axis=1, keepdims=1)
    mass = g.node("GatherElements", [cumsum, last_kept], name=f"{name}/mass", axis=1)
    threshold = g.node("Mul", [uniform, mass], name=f"{name}/threshold")
    above = g.node("And", [keep, g.node("Greater", [cumsum, threshold], name=f"{name}/cdf_above")],
                   name=f"{name}/above")
    above = g.node("Cast", [above], name=f"{name}/above_f", to=TensorProto.FLOAT)
    first_above = g.node("ArgMax", [above], name=f"{name}/first_above", axis=1, keepdims=1)
    # some rank is above iff the first maximum of `above` is one
    any_above = g.node("GatherElements", [above, first_above], name=f"{name}/any_above", axis=1)
    found = g.node("Greater", [any_above, g.const(0.0, "float32")], name=f"{name}/found")
    return g.node("Where", [found, first_above, last_kept], name=f"{name}/index")


def _emit_verdict(g: GraphBuilder, targets: str, candidates: str) -> str:
    """targets, candidates [O, W] int64 -> [O, 2] (accepted count, next token).

    accepted = the first j with d{j+1} != targets[j] (W - 1 when every proposal matches), found
    as the first maximum of [miss_0 .. miss_{W-2}, 1]; next = targets[accepted]."""
    proposals = _columns(g, candidates, 1, _END, "/verdict/proposals")
    drawn = _columns(g, targets, 0, -1, "/verdict/drawn")
    miss = g.node("Not", [g.node("Equal", [proposals, drawn], name="/verdict/match")],
                  name="/verdict/miss")
    miss = g.node("Cast", [miss], name="/verdict/miss_f", to=TensorProto.FLOAT)
    owners = g.node("Slice", [g.node("Shape", [candidates], name="/verdict/shape"),
                              g.const([0]), g.const([1])], name="/verdict/owners")
    stop_shape = g.node("Concat", [owners, g.const([1])], name="/verdict/stop_shape", axis=0)
    stop = g.node("ConstantOfShape", [stop_shape], name="/verdict/stop",
                  value=numpy_helper.from_array(np.array([1.0], np.float32)))  # [O, 1] ones
    misses = g.node("Concat", [miss, stop], name="/verdict/misses", axis=1)
    accepted = g.node("ArgMax", [misses], name="/verdict/accepted", axis=1, keepdims=1,
                      select_last_index=0)
    following = g.node("GatherElements", [targets, accepted], name="/verdict/next", axis=1)
    return g.node("Concat", [accepted, following], name="/verdict/Concat", axis=1)


def _finish(g: GraphBuilder) -> onnx.ModelProto:
    model = g.make_model()
    onnx.checker.check_model(model, full_check=True)
    return model


def make_argmax(vocab_size: int) -> onnx.ModelProto:
    """logits [R, V] float32 -> tokens [R] int64: np.argmax per row (the first maximal id)."""
    g = GraphBuilder("argmax")
    logits = g.input(LOGITS, "float32", ["R", vocab_size])
    tokens = g.node("ArgMax", [logits], name="/argmax/ArgMax", axis=1, keepdims=0,
                    select_last_index=0)
    g.output(tokens, TOKENS, "int64", ["R"])
    return _finish(g)


def make_sample(vocab_size: int) -> onnx.ModelProto:
    """logits [R, V], params [R, 4] (temperature, top_p, top_k, uniform) -> tokens [R]."""
    g = GraphBuilder("sample")
    logits = g.input(LOGITS, "float32", ["R", vocab_size])
    params = g.input(PARAMS, "float32", ["R", 4])
    columns = [_columns(g, params, i, i + 1, f"/params/{n}")
               for i, n in enumerate(("temperature", "top_p", "top_k", "uniform"))]
    token = _emit_sample(g, logits, *columns, vocab_size, "/sample")
    tokens = g.node("Squeeze", [token, g.const([1])], name="/sample/Squeeze")
    g.output(tokens, TOKENS, "int64", ["R"])
    return _finish(g)


def make_verify_argmax(vocab_size: int) -> onnx.ModelProto:
    """logits [O, W, V], candidates [O, W] -> verdict [O, 2] (accepted, next), targets by argmax."""
    g = GraphBuilder("verify_argmax")
    logits = g.input(LOGITS, "float32", ["O", "W", vocab_size])
    candidates = g.input(CANDIDATES, "int64", ["O", "W"])
    targets = g.node("ArgMax", [logits], name="/targets/ArgMax", axis=2, keepdims=0,
                     select_last_index=0)
    g.output(_emit_verdict(g, targets, candidates), VERDICT, "int64", ["O", 2])
    return _finish(g)


def make_verify(vocab_size: int) -> onnx.ModelProto:
    """logits [O, W, V], candidates [O, W], params [O, 3 + W] -> verdict [O, 2] (accepted, next).

    Row (o, j) draws as `sample` would with owner o's (temperature, top_p, top_k) and the
    uniform params[o, 3 + j]."""
    g = GraphBuilder("verify")
    logits = g.input(LOGITS, "float32", ["O", "W", vocab_size])
    candidates = g.input(CANDIDATES, "int64", ["O", "W"])
    params = g.input(PARAMS, "float32", ["O", "W_plus_3"])
    shape = g.node("Shape", [candidates], name="/rows/shape")  # [O, W]

    def per_row(value: str, name: str) -> str:  # [O, 1] or [O, W] -> [O * W, 1]
        expanded = g.node("Expand", [value, shape], name=f"{name}/Expand")
        return g.node("Reshape", [expanded, g.const([-1, 1])], name=f"{name}/Reshape")

    columns = [per_row(_columns(g, params, i, i + 1, f"/params/{n}"), f"/rows/{n}")
               for i, n in enumerate(("temperature", "top_p", "top_k"))]
    uniform = per_row(_columns(g, params, 3, _END, "/params/uniform"), "/rows/uniform")
    rows = g.node("Reshape", [logits, g.const([-1, vocab_size])], name="/rows/logits")
    drawn = _emit_sample(g, rows, *columns, uniform, vocab_size, "/sample")
    targets = g.node("Reshape", [drawn, shape], name="/targets/Reshape")
    g.output(_emit_verdict(g, targets, candidates), VERDICT, "int64", ["O", 2])
    return _finish(g)


def write_sampler_graphs(out_dir: str | Path, vocab_size: int) -> dict[str, str]:
    """Writes the four graphs into out_dir; returns the manifest's `graphs`: name -> file name."""
    makers = {"argmax": make_argmax, "sample": make_sample,
              "verify_argmax": make_verify_argmax, "verify": make_verify}
    for name, make in makers.items():
        onnx.save(make(vocab_size), str(Path(out_dir) / GRAPH_FILES[name]))
    return dict(GRAPH_FILES)
