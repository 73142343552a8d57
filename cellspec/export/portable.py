"""A graph rewritten into standard ONNX ops that TensorRT builds, in memory, when engines are built.

The artifact's graphs keep their fused ops (ONNX Runtime runs them as they are); only the copy
TensorRT parses is rewritten, and no weight is read or copied: initializers stored in weights.bin
stay references to it.

- `Attention` (opset 23, grouped kv heads, bool mask): TensorRT-RTX 1.7 parses it but builds no
  kernel for it ("not supported by a dedicated kernel"). It becomes two MatMuls around a Softmax.
- `SkipSimplifiedLayerNormalization` (com.microsoft): Add + RMSNormalization, the two standard
  ops it fuses, rather than a contrib op TensorRT does not document.
- `MatMulNBits`, `GatherBlockQuantized` (4-bit weights): TensorRT reads them only through a
  plugin, with float16 activations. They are refused: int4 artifacts get no engine.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from cellspec.errors import InvalidArgument
from cellspec.export.graph import CONTRIB, GraphBuilder

__all__ = ["rewrite_for_tensorrt"]

INT4_OPS = ("MatMulNBits", "GatherBlockQuantized")
# why an int4 artifact gets no engine (the node rewrite, and the command line before exporting)
INT4_NO_ENGINE = ("4-bit weights need a TensorRT plugin; int4 artifacts get no TensorRT engine "
                  "(export float16 or float32 for engines)")
# Attention attributes the rewrite implements; any other with a non-default value is refused.
_ATTENTION_ATTRIBUTES = {"q_num_heads", "kv_num_heads", "scale", "softmax_precision"}
_ATTENTION_DEFAULTS = {"is_causal": 0, "qk_matmul_output_mode": 0, "softcap": 0.0}


def rewrite_for_tensorrt(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with every `Attention` and `SkipSimplifiedLayerNormalization` node
    replaced by standard ops computing the same values (float32 rounding aside); every other node,
    input, output and initializer is kept as it is, names included.

    Raises `InvalidArgument` naming the node for an op it cannot express: the 4-bit
    `MatMulNBits` / `GatherBlockQuantized` (int4 artifacts get no TensorRT engine) and any other
    com.microsoft op, or an Attention using features the rewrite does not implement.
    """
    g = GraphBuilder(model.graph.name)
    kept = {t.name for t in model.graph.initializer}
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        start = len(g.nodes)
        _rewrite_node(g, node)
        nodes += g.nodes[start:] if len(g.nodes) > start else [node]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    result.graph.initializer.extend(t for name, t in g.initializers.items() if name not in kept)
    if not any(n.domain == CONTRIB for n in nodes):
        opsets = [o for o in result.opset_import if o.domain != CONTRIB]
        del result.opset_import[:]
        result.opset_import.extend(opsets)
    return result


def _rewrite_node(g: GraphBuilder, node: onnx.NodeProto) -> None:
    """Emit `node`'s replacement into g, or nothing when the node is kept as it is."""
    if node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
        make_grouped_attention(g, node)
    elif node.domain == CONTRIB and node.op_type == "SkipSimplifiedLayerNormalization":
        make_skip_rms_norm(g, node)
    elif node.domain == CONTRIB and node.op_type in INT4_OPS:
        raise InvalidArgument(f"node {node.name!r} ({node.op_type}): {INT4_NO_ENGINE}")
    elif node.domain == CONTRIB:
        raise InvalidArgument(f"node {node.name!r} ({CONTRIB}.{node.op_type}): no standard-op "
                              f"form for TensorRT")


def make_skip_rms_norm(g: GraphBuilder, node: onnx.NodeProto) -> None:
    """SkipSimplifiedLayerNormalization(x, skip, gamma[, bias]) -> (rms_norm(x + skip + bias),
    unused mean, unused inv_std_var, x + skip + bias): the sum, then RMSNormalization over the
    last axis with float32 statistics, both under the node's output names."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    outputs = list(node.output) + [""] * (4 - len(node.output))
    if outputs[1] or outputs[2]:
        raise InvalidArgument(f"node {node.name!r} (SkipSimplifiedLayerNormalization): its "
                              f"mean / inv_std_var outputs have no standard-op form")
    x, skip, gamma, *bias = node.input
    terms = [x, skip] + [b for b in bias if b]
    total = terms[0]
    for k, term in enumerate(terms[1:]):
        is_last = k == len(terms) - 2
        total = g.node("Add", [total, term], name=f"{node.name}/Add_{k}",
                       outputs=[outputs[3]] if is_last and outputs[3] else None)
    g.node("RMSNormalization", [total, gamma], name=f"{node.name}/RMSNormalization",
           outputs=[outputs[0]], axis=-1, epsilon=attrs.get("epsilon", 1e-5), stash_type=1)


def make_grouped_attention(g: GraphBuilder, node: onnx.NodeProto) -> None:
    """Attention(q [S, Q, H * D], k / v [S, T, KV * D], mask [S, 1, Q, T] bool) -> [S, Q, H * D],
    T = N + Q, as MatMul -> scale -> Where(mask, scores, -inf) -> Softmax -> MatMul.

    The G = H / KV query heads that share a kv head sit on their own axis: q as
    [S, KV, G, Q, D], so query head h = kv * G + g reads kv head h // G (transformers'
    repeat_kv) while k and v, as [S, KV, 1, ., .], and the mask, as [S, 1, 1, Q, T], are
    broadcast over the G heads rather than copied. Scores and softmax are in the node's
    softmax_precision (float32 when unset); a row with no visible column gives 0, as ONNX
    Runtime's Attention does (its softmax over only -inf is NaN, replaced by 0)."""
    heads, kv_heads, scale, precision = _attention_attributes(node)
    groups, name = heads // kv_heads, node.name
    q, k, v, mask = node.input
    q = g.node("Reshape", [q, g.const([0, 0, kv_heads, groups, -1])], name=f"{name}/q/Reshape")
    q = g.node("Transpose", [q], name=f"{name}/q/Transpose", perm=[0, 2, 3, 1, 4])
    # keys as [S, KV, 1, D, T] (already transposed for q @ k^T), values as [S, KV, 1, T, D]
    k = _kv_heads(g, k, kv_heads, [0, 2, 3, 1], f"{name}/k")
    v = _kv_heads(g, v, kv_heads, [0, 2, 1, 3], f"{name}/v")
    mask = g.node("Unsqueeze", [mask, g.const([1])], name=f"{name}/mask/Unsqueeze")
    scores = g.node("MatMul", [q, k], name=f"{name}/scores/MatMul")  # [S, KV, G, Q, T]
    scores = g.node("Cast", [scores], name=f"{name}/scores/Cast", to=precision)
    scores = g.node("Mul", [scores, g.const(scale, _dtype_name(precision))],
                    name=f"{name}/scores/Scale")
    minus_inf = g.const(float("-inf"), _dtype_name(precision))
    scores = g.node("Where", [mask, scores, minus_inf], name=f"{name}/scores/Mask")
    probs = g.node("Softmax", [scores], name=f"{name}/probs/Softmax", axis=-1)
    zero = g.const(0.0, _dtype_name(precision))
    probs = g.node("Where", [mask, probs, zero], name=f"{name}/probs/Mask")
    probs = g.node("CastLike", [probs, v], name=f"{name}/probs/CastLike")
    out = g.node("MatMul", [probs, v], name=f"{name}/out/MatMul")  # [S, KV, G, Q, D]
    out = g.node("Transpose", [out], name=f"{name}/out/Transpose", perm=[0, 3, 1, 2, 4])
    g.node("Reshape", [out, g.const([0, 0, -1])], name=f"{name}/out/Reshape",
           outputs=[node.output[0]])


def _kv_heads(g: GraphBuilder, x: str, kv_heads: int, perm: list[int], name: str) -> str:
    """x [S, T, KV * D] -> [S, T, KV, D] permuted by perm, with a unit G axis at 2."""
    x = g.node("Reshape", [x, g.const([0, 0, kv_heads, -1])], name=f"{name}/Reshape")
    x = g.node("Transpose", [x], name=f"{name}/Transpose", perm=perm)
    return g.node("Unsqueeze", [x, g.const([2])], name=f"{name}/Unsqueeze")


def _attention_attributes(node: onnx.NodeProto) -> tuple[int, int, float, int]:
    """(q_num_heads, kv_num_heads, scale, softmax precision) of an Attention node as cellspec
    emits it: q, k, v and mask, 3-D, an explicit scale; anything else is refused by name."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    heads, kv_heads = attrs.get("q_num_heads", 0), attrs.get("kv_num_heads", 0)
    unsupported = sorted(n for n, v in attrs.items()
                         if n not in _ATTENTION_ATTRIBUTES and v != _ATTENTION_DEFAULTS.get(n))
    problems = {
        f"attributes {unsupported}": bool(unsupported),
        f"inputs {list(node.input)}, expected q, k, v, mask": len(node.input) != 4
        or not all(node.input),
        f"outputs {list(node.output)}, expected one": any(node.output[1:]),
        "no q_num_heads / kv_num_heads (4-D inputs)": not heads or not kv_heads,
        f"{heads} query heads, not a multiple of {kv_heads} kv heads":
            bool(kv_heads) and heads % kv_heads != 0,
        "no scale attribute": "scale" not in attrs,
    }
    problem = next((text for text, is_problem in problems.items() if is_problem), None)
    if problem is not None:
        raise InvalidArgument(f"node {node.name!r} (Attention): {problem}; the TensorRT "
                              f"rewrite takes the Attention cellspec's graphs use")
    precision = attrs.get("softmax_precision", TensorProto.FLOAT)
    return heads, kv_heads, float(attrs["scale"]), precision


def _dtype_name(onnx_type: int) -> str:
    return helper.tensor_dtype_to_np_dtype(onnx_type).name
