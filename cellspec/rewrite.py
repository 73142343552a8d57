"""Rewrites of the attention in an exported graph for a provider that runs it another way.

Both sides use it: the exporter (a TensorRT build parses standard ops) and the runtime (ONNX
Runtime's CUDA provider takes opset-23 `Attention` only in forms it has kernels for). A rewrite
returns a new in-memory model with the same inputs, outputs and initializers (initializers that
live in weights.bin stay references to it); only Attention nodes (and the nodes feeding them
that the new form makes dead) change.

- `decompose_attention`: every Attention becomes standard ops: q as [S, KV, G, Q, D] (query
  head h reads kv head h // G, as transformers' repeat_kv), k/v as [S, KV, 1, ., D], scores in
  float32, Where(mask, scores, -inf), Softmax, Where(mask, probs, 0), MatMul, back to
  [S, Q, H * D]. Any provider runs it; it costs about fifteen nodes per attention.
- `attention_for_cuda`: the CUDA provider's grouped-query kernel (flash or memory-efficient
  attention) runs an Attention with float16/bfloat16 inputs, `is_causal`, the past as
  `past_key`/`past_value` [S, KV, N, D] and a 2-D bool mask whose leading Trues count each
  row's valid keys (the past's valid length, then the Q new tokens). The target's attention
  over [cell_table cells ; new tokens] has that shape once its cells are gathered as the past:
  such nodes get the fused form, and the others (float32 inputs, sliding windows, the draft's
  non-causal blocks) are decomposed.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["attention_for_cuda", "decompose_attention"]

_HALF = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


class _Emitter:
    """Makes nodes and constants with names under a prefix (no name clashes with the graph's)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.constants: dict[str, TensorProto] = {}

    def node(self, op: str, inputs: list[str], name: str, outputs: list[str] | None = None,
             **attrs) -> str:
        outputs = outputs or [f"{name}_out"]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
        return outputs[0]

    def const(self, values, dtype, name: str) -> str:
        if name not in self.constants:
            self.constants[name] = numpy_helper.from_array(np.asarray(values, dtype=dtype), name)
        return name


def decompose_attention(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every opset-23 Attention node replaced by standard ops."""
    return _rewrite(model, lambda e, node, producers: _decompose(e, node))


def attention_for_cuda(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Attention in a form the CUDA provider has a kernel for (module doc)."""
    is_half = _activation_type(model) in _HALF

    def rewrite(e: _Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = _gathered_past(node, producers)
        causal_target = node.input[3] == "attn_mask"  # windowed layers read attn_mask_window
        if past is not None and causal_target and is_half:
            _grouped(e, node, *past)
        else:
            _decompose(e, node)

    return _rewrite(model, rewrite)


def _rewrite(model: onnx.ModelProto, rewrite) -> onnx.ModelProto:
    emitter = _Emitter()
    producers = {out: node for node in model.graph.node for out in node.output}
    nodes = []
    for node in model.graph.node:
        if node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
            start = len(emitter.nodes)
            rewrite(emitter, node, producers)
            nodes += emitter.nodes[start:]
        else:
            nodes.append(node)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(_live(nodes, {o.name for o in model.graph.output}))
    result.graph.initializer.extend(emitter.constants.values())
    return result


def _live(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """The nodes some graph output depends on, in order (a rewrite can leave Concats dead)."""
    needed, live = set(outputs), []
    for node in reversed(nodes):
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(i for i in node.input if i)
    return live[::-1]


def _attributes(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _decompose(e: _Emitter, node: onnx.NodeProto) -> None:
    attrs = _attributes(node)
    heads, kv_heads, scale = attrs["q_num_heads"], attrs["kv_num_heads"], attrs["scale"]
    name, (q, k, v, mask) = node.name, node.input[:4]
    q = e.node("Reshape", [q, e.const([0, 0, kv_heads, heads // kv_heads, -1], np.int64,
                                      f"{name}/q_shape")], f"{name}/q/Reshape")
    q = e.node("Transpose", [q], f"{name}/q/Transpose", perm=[0, 2, 3, 1, 4])  # [S,KV,G,Q,D]
    kv_shape = e.const([0, 0, kv_heads, -1], np.int64, f"{name}/kv_shape")
    axis = e.const([2], np.int64, f"{name}/group_axis")
    k = e.node("Reshape", [k, kv_shape], f"{name}/k/Reshape")
    k = e.node("Transpose", [k], f"{name}/k/Transpose", perm=[0, 2, 3, 1])  # [S, KV, D, T]
    k = e.node("Unsqueeze", [k, axis], f"{name}/k/Unsqueeze")
    v = e.node("Reshape", [v, kv_shape], f"{name}/v/Reshape")
    v = e.node("Transpose", [v], f"{name}/v/Transpose", perm=[0, 2, 1, 3])  # [S, KV, T, D]
    v = e.node("Unsqueeze", [v, axis], f"{name}/v/Unsqueeze")
    mask = e.node("Unsqueeze", [mask, e.const([1], np.int64, f"{name}/mask_axis")],
                  f"{name}/mask/Unsqueeze")  # [S, 1, 1, Q, T]
    scores = e.node("MatMul", [q, k], f"{name}/scores/MatMul")  # [S, KV, G, Q, T]
    scores = e.node("Cast", [scores], f"{name}/scores/Cast", to=TensorProto.FLOAT)
    scores = e.node("Mul", [scores, e.const(scale, np.float32, f"{name}/scale")],
                    f"{name}/scores/Scale")
    scores = e.node("Where", [mask, scores, e.const(-np.inf, np.float32, f"{name}/minus_inf")],
                    f"{name}/scores/Mask")
    probs = e.node("Softmax", [scores], f"{name}/probs/Softmax", axis=-1)
    probs = e.node("CastLike", [probs, v], f"{name}/probs/CastLike")
    out = e.node("MatMul", [probs, v], f"{name}/out/MatMul")  # [S, KV, G, Q, D]
    out = e.node("Transpose", [out], f"{name}/out/Transpose", perm=[0, 3, 1, 2, 4])
    e.node("Reshape", [out, e.const([0, 0, -1], np.int64, f"{name}/out_shape")],
           f"{name}/out/Reshape", outputs=[node.output[0]])


def _gathered_past(node: onnx.NodeProto, producers: dict) -> tuple[str, str, str, str] | None:
    """(gathered keys [S, N, KV*D], new keys, gathered values, new values) when the node's k and
    v are Concat(Gather(pool, cell_table), new) on axis 1, as the target graph makes them."""
    found = []
    for name in node.input[1:3]:
        concat = producers.get(name)
        if concat is None or concat.op_type != "Concat" or len(concat.input) != 2:
            return None
        gather = producers.get(concat.input[0])
        if gather is None or gather.op_type != "Gather" or gather.input[1] != "cell_table":
            return None
        found += [concat.input[0], concat.input[1]]
    return tuple(found)


def _grouped(e: _Emitter, node: onnx.NodeProto, past_k: str, new_k: str, past_v: str,
             new_v: str) -> None:
    """The fused form: past [S, KV, N, D] from the gathered cells, k/v the new tokens only,
    a right-padded 2-D mask from the row's lengths, causal."""
    attrs = _attributes(node)
    kv_heads, name = attrs["kv_num_heads"], node.name
    mask = _right_padded_mask(e)
    shape = e.const([0, 0, kv_heads, -1], np.int64, "/cuda/kv_shape")
    pasts = []
    for which, gathered in (("k", past_k), ("v", past_v)):
        heads = e.node("Reshape", [gathered, shape], f"{name}/{which}_past/Reshape")
        pasts.append(e.node("Transpose", [heads], f"{name}/{which}_past/Transpose",
                            perm=[0, 2, 1, 3]))  # [S, KV, N, D]
    e.node("Attention", [node.input[0], new_k, new_v, mask, *pasts], name,
           outputs=[node.output[0], f"{name}/present_key", f"{name}/present_value"],
           q_num_heads=attrs["q_num_heads"], kv_num_heads=kv_heads, scale=attrs["scale"],
           is_causal=1)


def _right_padded_mask(e: _Emitter) -> str:
    """[S, N + Q] bool, once per graph: the first lengths[s] + Q columns True, where
    lengths[s] counts the cells the row's first token sees (attn_mask[s, 0, 0, :N])."""
    if "/cuda/mask" in {n.name for n in e.nodes}:
        return "/cuda/mask_out"
    int64 = np.int64
    shape = e.node("Shape", ["attn_mask"], "/cuda/mask_shape")  # [S, 1, Q, N + Q]
    width = e.node("Gather", [shape, e.const(2, int64, "/cuda/two")], "/cuda/width")
    span = e.node("Gather", [shape, e.const(3, int64, "/cuda/three")], "/cuda/span")
    cells = e.node("Sub", [span, width], "/cuda/cells")  # N
    first = e.node("Slice", ["attn_mask", e.const([0, 0], int64, "/cuda/zeros"),
                             _cells_end(e, cells), e.const([2, 3], int64, "/cuda/axes")],
                   "/cuda/first_row")  # [S, 1, 1, N]: what the row's first token reads
    counts = e.node("Cast", [first], "/cuda/first_row_int", to=TensorProto.INT64)
    lengths = e.node("ReduceSum", [counts, e.const([1, 2, 3], int64, "/cuda/sum_axes")],
                     "/cuda/lengths", keepdims=0)  # [S]
    total = e.node("Add", [lengths, width], "/cuda/total")  # valid keys per row
    columns = e.node("Range", [e.const(0, int64, "/cuda/zero"), span,
                               e.const(1, int64, "/cuda/one")], "/cuda/columns")
    total = e.node("Unsqueeze", [total, e.const([1], int64, "/cuda/axis1")], "/cuda/total_col")
    return e.node("Less", [columns, total], "/cuda/mask", outputs=["/cuda/mask_out"])


def _cells_end(e: _Emitter, cells: str) -> str:
    """Slice ends [1, N] for the first query row's read cells."""
    one = e.const([1], np.int64, "/cuda/one_1d")
    cells_1d = e.node("Unsqueeze", [cells, e.const([0], np.int64, "/cuda/axis0")],
                      "/cuda/cells_1d")
    return e.node("Concat", [one, cells_1d], "/cuda/ends", axis=0)


def _activation_type(model: onnx.ModelProto) -> int | None:
    """The model dtype: the element type of its KV pools (k_pool.0), None without pools."""
    pools = [v for v in model.graph.input if v.name.startswith("k_pool.")]
    return pools[0].type.tensor_type.elem_type if pools else None
