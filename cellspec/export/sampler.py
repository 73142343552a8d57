"""The sampler and verifier graphs: small float32 ONNX graphs that run wherever the logits are.

Each graph reproduces the host rule of `cellspec.runtime.sampling` (its module docstring), using
standard opset-21 ops only (TopK, CumSum, ArgMax, GatherElements, Where, ...):

- `argmax`: logits [R, V] -> tokens [R], the lowest id among the maximal logits.
- `sample`: logits [R, V], params [R, 4] (temperature, top_p, top_k, uniform) -> tokens [R].
- `verify_argmax`: logits [O, W, V], candidates [O, W] (anchor, d1..d{W-1}) -> verdict [O, 2]
  (accepted count, next token), targets by argmax.
- `verify`: as verify_argmax with params [O, 3 + W] (temperature, top_p, top_k, then one uniform
  per position j = 0..W-1); row j's target is what `sample` draws with uniform j.

The vocabulary order relies on TopK's tie rule (ONNX: the lower index first), which is the host's
"ties: lower id first". TensorRT's TopK caps k at 3840, so the full-vocabulary sort of `sample` and
`verify` does not build as a TensorRT engine; run them on ONNX Runtime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cellspec.artifact import LOGITS, TOKENS

OPSET = 21
IR_VERSION = 10
PARAMS = "params"  # float32 [R, 4] or [O, 3 + W]
CANDIDATES = "candidates"  # int64 [O, W]: anchor, d1..d{W-1}
VERDICT = "verdict"  # int64 [O, 2]: accepted count, next token
GRAPH_FILES = {
    "argmax": "argmax.onnx",
    "sample": "sample.onnx",
    "verify_argmax": "verify_argmax.onnx",
    "verify": "verify.onnx",
}


class _Nodes:
    """Collects nodes and constants under one scope; names are deterministic: /{scope}/{name}."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []

    def op(self, op_type: str, inputs: list[str], name: str, outputs: int = 1, **attrs) -> str:
        """Emits one node; returns its first output (further outputs are `{first}:{i}`)."""
        full = f"/{self.scope}/{name}"
        names = [f"{full}/out"] + [f"{full}/out:{i}" for i in range(1, outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=full, **attrs))
        return names[0]

    def const(self, name: str, value: np.ndarray) -> str:
        full = f"/{self.scope}/{name}"
        self.constants.append(numpy_helper.from_array(np.asarray(value), full))
        return full


def _model(nodes: _Nodes, inputs: list, outputs: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes.nodes, nodes.scope, inputs, outputs, nodes.constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="cellspec")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _column(g: _Nodes, params: str, index: int, name: str) -> str:
    """params[:, index:index + 1]: [rows, 1]."""
    starts, ends = g.const(f"{name}/starts", [index]), g.const(f"{name}/ends", [index + 1])
    return g.op("Slice", [params, starts, ends, g.const(f"{name}/axes", [1])], name)


def _emit_sample(g: _Nodes, logits: str, temperature: str, top_p: str, top_k: str,
                 uniform: str, vocab_size: int) -> str:
    """logits [R, V]; temperature, top_p, top_k, uniform [R, 1] float32 -> tokens [R, 1] int64."""
    zero, one = g.const("zero", np.float32(0.0)), g.const("one", np.float32(1.0))
    is_greedy = g.op("Equal", [temperature, zero], "is_greedy")
    safe_t = g.op("Where", [is_greedy, one, temperature], "safe_temperature")
    z = g.op("Div", [logits, safe_t], "scaled")
    # order: the vocabulary by z descending, ties by lower id (TopK's tiebreak).
    values = g.op("TopK", [z, g.const("vocab", np.array([vocab_size], np.int64))], "sort",
                  outputs=2, axis=-1, largest=1, sorted=1)
    order = f"{values}:1"
    rank = g.op("Range", [g.const("r0", np.int64(0)), g.const("rV", np.int64(vocab_size)),
                          g.const("r1", np.int64(1))], "rank")
    k = g.op("Cast", [top_k], "k", to=TensorProto.INT64)
    vocab = g.const("vocab_scalar", np.int64(vocab_size))
    k_off = g.op("Or", [g.op("LessOrEqual", [k, g.const("k0", np.int64(0))], "k_zero"),
                        g.op("Greater", [k, vocab], "k_big")], "k_off")
    k = g.op("Where", [k_off, vocab, k], "k_eff")
    keep_k = g.op("Less", [rank, k], "keep_k")  # [R, V]: rank < top_k
    z0 = _column(g, values, 0, "z0")
    exp = g.op("Exp", [g.op("Sub", [values, z0], "shifted")], "exp")
    exp = g.op("Where", [keep_k, exp, zero], "exp_kept")
    total = g.op("ReduceSum", [exp, g.const("axis1", np.array([1], np.int64))], "total",
                 keepdims=1)
    probs = g.op("Div", [exp, total], "probs")
    # exclusive mass before rank j, as the host computes it: cumsum(p) - p.
    cumsum = g.op("CumSum", [probs, g.const("cum_axis", np.int64(1))], "cumsum")
    exclusive = g.op("Sub", [cumsum, probs], "exclusive")
    is_first = g.op("Equal", [rank, g.const("rank0", np.int64(0))], "is_first")
    keep_p = g.op("Or", [g.op("Less", [exclusive, top_p], "below_p"), is_first], "keep_p")
    keep = g.op("And", [keep_k, keep_p], "keep")
    kept = g.op("Where", [keep, probs, zero], "kept")
    cdf = g.op("CumSum", [kept, g.const("cdf_axis", np.int64(1))], "cdf")
    # cdf's last column is the kept mass (zeros after the last kept rank add nothing).
    last = g.op("Slice", [cdf, g.const("last/starts", [-1]), g.const("last/ends", [vocab_size]),
                          g.const("last/axes", [1])], "kept_total")
    threshold = g.op("Mul", [uniform, last], "threshold")
    above = g.op("And", [keep, g.op("Greater", [cdf, threshold], "cdf_above")], "above")
    above_f = g.op("Cast", [above], "above_f", to=TensorProto.FLOAT)
    first_above = g.op("ArgMax", [above_f], "first_above", axis=1, keepdims=1)
    has_above = g.op("ReduceMax", [above_f, g.const("axis1b", np.array([1], np.int64))],
                     "has_above", keepdims=1)
    # the last kept rank, where no cumulative sum exceeds the threshold: argmax of keep * rank.
    rank_f = g.op("Cast", [rank], "rank_f", to=TensorProto.FLOAT)
    kept_rank = g.op("Mul", [g.op("Cast", [keep], "keep_f", to=TensorProto.FLOAT), rank_f],
                     "kept_rank")
    last_kept = g.op("ArgMax", [kept_rank], "last_kept", axis=1, keepdims=1)
    index = g.op("Where", [g.op("Greater", [has_above, zero], "found"), first_above, last_kept],
                 "index")
    sampled = g.op("GatherElements", [order, index], "sampled", axis=1)
    greedy = g.op("ArgMax", [logits], "greedy", axis=1, keepdims=1, select_last_index=0)
    return g.op("Where", [is_greedy, greedy, sampled], "token")


def _emit_verdict(g: _Nodes, targets: str, candidates: str) -> str:
    """targets, candidates [O, W] int64 -> [O, 2] (accepted count, next token).

    accepted = the first j with d{j+1} != targets[j] (W - 1 when every proposal matches)."""
    def cols(x: str, start: int, end: int, name: str) -> str:
        return g.op("Slice", [x, g.const(f"{name}/starts", [start]),
                              g.const(f"{name}/ends", [end]), g.const(f"{name}/axes", [1])], name)

    proposals = cols(candidates, 1, np.iinfo(np.int64).max, "proposals")
    drawn = cols(targets, 0, -1, "drawn")
    miss = g.op("Not", [g.op("Equal", [proposals, drawn], "match")], "miss")
    owners = g.op("Slice", [g.op("Shape", [candidates], "candidates_shape"), g.const("o/starts", [0]),
                            g.const("o/ends", [1])], "o")
    stop_shape = g.op("Concat", [owners, g.const("one_col", np.array([1], np.int64))],
                      "stop_shape", axis=0)
    stop = g.op("ConstantOfShape", [stop_shape], "stop",  # [O, 1] of ones: a sentinel miss
                value=numpy_helper.from_array(np.array([1.0], np.float32)))
    miss_f = g.op("Concat", [g.op("Cast", [miss], "miss_f", to=TensorProto.FLOAT), stop],
                  "misses", axis=1)
    accepted = g.op("ArgMax", [miss_f], "accepted", axis=1, keepdims=1, select_last_index=0)
    following = g.op("GatherElements", [targets, accepted], "next", axis=1)
    return g.op("Concat", [accepted, following], "verdict", axis=1)


def _tensor(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _identity(g: _Nodes, source: str, name: str) -> None:
    g.nodes.append(helper.make_node("Identity", [source], [name], name=f"/{g.scope}/{name}"))


def make_argmax(vocab_size: int) -> onnx.ModelProto:
    """logits [R, V] float32 -> tokens [R] int64: np.argmax per row (first maximal id)."""
    g = _Nodes("argmax")
    tokens = g.op("ArgMax", [LOGITS], "argmax", axis=1, keepdims=0, select_last_index=0)
    _identity(g, tokens, TOKENS)
    return _model(g, [_tensor(LOGITS, TensorProto.FLOAT, ["R", vocab_size])],
                  [_tensor(TOKENS, TensorProto.INT64, ["R"])])


def make_sample(vocab_size: int) -> onnx.ModelProto:
    """logits [R, V], params [R, 4] (temperature, top_p, top_k, uniform) -> tokens [R]."""
    g = _Nodes("sample")
    columns = [_column(g, PARAMS, i, n) for i, n in enumerate(("t", "top_p", "top_k", "u"))]
    token = _emit_sample(g, LOGITS, *columns, vocab_size)
    tokens = g.op("Squeeze", [token, g.const("squeeze_axis", np.array([1], np.int64))], "squeeze")
    _identity(g, tokens, TOKENS)
    return _model(g, [_tensor(LOGITS, TensorProto.FLOAT, ["R", vocab_size]),
                      _tensor(PARAMS, TensorProto.FLOAT, ["R", 4])],
                  [_tensor(TOKENS, TensorProto.INT64, ["R"])])


def make_verify_argmax(vocab_size: int) -> onnx.ModelProto:
    """logits [O, W, V], candidates [O, W] -> verdict [O, 2] (accepted, next) by argmax."""
    g = _Nodes("verify_argmax")
    targets = g.op("ArgMax", [LOGITS], "targets", axis=2, keepdims=0, select_last_index=0)
    _identity(g, _emit_verdict(g, targets, CANDIDATES), VERDICT)
    return _model(g, [_tensor(LOGITS, TensorProto.FLOAT, ["O", "W", vocab_size]),
                      _tensor(CANDIDATES, TensorProto.INT64, ["O", "W"])],
                  [_tensor(VERDICT, TensorProto.INT64, ["O", 2])])


def make_verify(vocab_size: int) -> onnx.ModelProto:
    """logits [O, W, V], candidates [O, W], params [O, 3 + W] -> verdict [O, 2] (accepted, next).

    Row (o, j) is sampled as `sample` would with (temperature, top_p, top_k) of owner o and
    uniform params[o, 3 + j]."""
    g = _Nodes("verify")
    shape = g.op("Shape", [CANDIDATES], "ow")  # [O, W]
    column = g.const("column", np.array([-1, 1], np.int64))

    def per_row(value: str, name: str) -> str:  # [O, 1] or [O, W] -> [O * W, 1]
        return g.op("Reshape", [g.op("Expand", [value, shape], f"{name}/expand"), column], name)

    t, top_p, top_k = (per_row(_column(g, PARAMS, i, n), f"{n}_rows")
                       for i, n in enumerate(("t", "top_p", "top_k")))
    uniforms = g.op("Slice", [PARAMS, g.const("u/starts", [3]),
                              g.const("u/ends", [np.iinfo(np.int64).max]),
                              g.const("u/axes", [1])], "u")
    rows = g.op("Reshape", [LOGITS, g.const("rows_shape", np.array([-1, vocab_size], np.int64))],
                "rows")
    drawn = _emit_sample(g, rows, t, top_p, top_k, per_row(uniforms, "u_rows"), vocab_size)
    targets = g.op("Reshape", [drawn, shape], "targets")
    _identity(g, _emit_verdict(g, targets, CANDIDATES), VERDICT)
    return _model(g, [_tensor(LOGITS, TensorProto.FLOAT, ["O", "W", vocab_size]),
                      _tensor(CANDIDATES, TensorProto.INT64, ["O", "W"]),
                      _tensor(PARAMS, TensorProto.FLOAT, ["O", "3 + W"])],
                  [_tensor(VERDICT, TensorProto.INT64, ["O", 2])])


def write_sampler_graphs(out_dir: str | Path, vocab_size: int) -> dict[str, str]:
    """Writes the four graphs into out_dir; returns the manifest's `graphs`: name -> file name."""
    makers = {"argmax": make_argmax, "sample": make_sample,
              "verify_argmax": make_verify_argmax, "verify": make_verify}
    for name, make in makers.items():
        onnx.save(make(vocab_size), str(Path(out_dir) / GRAPH_FILES[name]))
    return dict(GRAPH_FILES)
