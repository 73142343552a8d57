"""Attention in forms a provider has kernels for: decomposed into standard ops, ONNX Runtime's
CUDA GroupQueryAttention, and by position for `ort-cpu` (the package doc)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from cellspec import artifact as names
from cellspec.rewrite.graph import (
    CONTRIB,
    HALF,
    Emitter,
    activation_type,
    gathered_past,
    import_domain,
    node_attributes,
    rewrite_attention,
)

ATTN_SEQLENS = "attn_seqlens"  # int32 [S]: lengths[s] + Q - 1, GroupQueryAttention's seqlens_k
ATTN_TOTAL = "attn_total"  # int32 scalar: N + Q, its total_sequence_length (a host input)
HOST_INPUTS = (ATTN_TOTAL,)  # inputs a provider reads from host memory
NEW_COLUMNS = "new_columns"  # int64 [S, Q, 2]: (row, column) of each new token's key
_COLUMN_MULTIPLE = 64  # by-position steps read a multiple of this many columns


def grouped_feeds(lengths: np.ndarray, num_cells: int, width: int) -> dict[str, np.ndarray]:
    """The inputs `attention_for_cuda` adds, for rows whose sequences have `lengths` [S] cells
    in a step of `num_cells` cells read and `width` tokens per row: the total length is the
    past buffer's, N + Q, so that the present has the past's shape."""
    return {ATTN_SEQLENS: (lengths + width - 1).astype(np.int32),
            ATTN_TOTAL: np.array(num_cells + width, dtype=np.int32)}


def by_position_feeds(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What `attention_by_position`'s graph reads instead of a step's cell_table [S, N] and
    masks [S, 1, Q, N + Q]: a cell table of C columns (C >= N and past every new token's
    position, a multiple of 64; the extra columns name cell 0 and are masked), `new_columns`
    (a row's token u goes to column positions[s, 0] + u: its position for real tokens; padding
    slots, which sit after a row's real ones or in a padding row of position 0, land on columns
    no real token of the row sees) and the masks moved to those columns, with one more row for
    the dummy query, which sees column 0."""
    positions, table = feeds[names.POSITIONS], feeds[names.CELL_TABLE]
    rows, width = positions.shape
    cells = table.shape[1]
    columns = positions[:, :1] + np.arange(width)[None, :]  # [S, Q]
    total = max(cells, int(columns.max()) + 1)
    total = -(-total // _COLUMN_MULTIPLE) * _COLUMN_MULTIPLE
    out = {names.CELL_TABLE: np.zeros((rows, total), np.int64),
           NEW_COLUMNS: np.stack([np.broadcast_to(np.arange(rows)[:, None], (rows, width)),
                                  columns], axis=-1).astype(np.int64)}
    out[names.CELL_TABLE][:, :cells] = table
    row = np.arange(rows)[:, None, None]
    query = np.arange(width)[None, :, None]
    for name in (names.ATTN_MASK, names.ATTN_MASK_WINDOW):
        if name not in feeds:
            continue
        mask = feeds[name]
        moved = np.zeros((rows, 1, width + 1, total), bool)
        moved[:, :, :width, :cells] = mask[..., :cells]
        moved[row, 0, query, columns[:, None, :]] |= mask[:, 0, :, cells:]
        moved[:, 0, width, 0] = True
        out[name] = moved
    return out


def attention_by_position(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with the attention of a target that feeds a draft (it outputs `taps`) by
    position (the package doc); other graphs as they are. Adds the input `new_columns`; the cell
    table and masks it reads then have the shapes `by_position_feeds` gives them. (A target
    without a draft never verifies, and by position costs its decoding 0-7% at batch 1 and
    about 10% at batch 8 with 4-bit weights; the profiler puts it in the dummy query.)"""
    if model.graph.name != "target" or all(o.name != names.TAPS for o in model.graph.output):
        return model
    used = []

    def rewrite(e: Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = gathered_past(node, producers)
        if past is None:
            e.nodes.append(node)
            return
        name = node.name
        keys, values = (e.node("ScatterND", [gathered, NEW_COLUMNS, new], f"{name}/{which}/Place")
                        for which, gathered, new in (("k", past[0], past[1]),
                                                     ("v", past[2], past[3])))
        pads = e.const([0, 0, 0, 0, 1, 0], np.int64, "/by_position/query_pads")
        query = e.node("Pad", [node.input[0], pads], f"{name}/q/Pad")  # the dummy query row
        both = e.node("Attention", [query, keys, values, node.input[3]], name,
                      outputs=[f"{name}/with_dummy"], **node_attributes(node))
        e.node("Slice", [both, e.const([0], np.int64, "/by_position/zero"),
                         e.const([-1], np.int64, "/by_position/minus_one"),
                         e.const([1], np.int64, "/by_position/query_axis")],
               f"{name}/Slice", outputs=[node.output[0]])
        used.append(name)

    result = rewrite_attention(model, rewrite)
    if used:
        result.graph.input.append(helper.make_tensor_value_info(
            NEW_COLUMNS, TensorProto.INT64, ["S", "Q", 2]))
        shapes = {names.CELL_TABLE: ["S", "C"], names.ATTN_MASK: ["S", 1, "Q + 1", "C"],
                  names.ATTN_MASK_WINDOW: ["S", 1, "Q + 1", "C"]}
        for value in result.graph.input:
            if value.name in shapes:
                value.CopyFrom(helper.make_tensor_value_info(
                    value.name, value.type.tensor_type.elem_type, shapes[value.name]))
    return result


def decompose_attention(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every opset-23 Attention node replaced by standard ops."""
    return rewrite_attention(model, lambda e, node, producers: decompose_node(e, node))


def attention_for_cuda(model: onnx.ModelProto, dtypes: tuple[int, ...] = HALF
                       ) -> onnx.ModelProto:
    """`model` with each Attention in a form the CUDA provider has a kernel for (the package doc);
    `dtypes`: the activation types GroupQueryAttention takes (the CPU's takes float32 too)."""
    # only the target's attention is causal (a draft block sees its whole block)
    grouped = activation_type(model) in dtypes and model.graph.name == "target"
    used = []

    def rewrite(e: Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = gathered_past(node, producers)
        causal_target = node.input[3] == "attn_mask"  # windowed layers read attn_mask_window
        if past is not None and causal_target and grouped:
            _grouped(e, node, *past)
            used.append(node.name)
        else:
            decompose_node(e, node)

    result = rewrite_attention(model, rewrite)
    if used:
        result.graph.input.extend([
            helper.make_tensor_value_info(ATTN_SEQLENS, TensorProto.INT32, ["S"]),
            helper.make_tensor_value_info(ATTN_TOTAL, TensorProto.INT32, [])])
        import_domain(result, CONTRIB)
    return result


def decompose_node(e: Emitter, node: onnx.NodeProto) -> None:
    attrs = node_attributes(node)
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


def _grouped(e: Emitter, node: onnx.NodeProto, past_k: str, new_k: str, past_v: str,
             new_v: str) -> None:
    """GroupQueryAttention with the past and present in one buffer: [cells ; new tokens]
    [S, KV, N + Q, D] (the Concat the target already makes) is the past, each row's valid
    length lengths[s]; the op writes the new tokens at lengths[s] in place (ONNX Runtime
    reuses the past's buffer for the present, which must then have its shape) and attends
    causally over the first lengths[s] + Q."""
    attrs = node_attributes(node)
    kv_heads, name = attrs["kv_num_heads"], node.name
    # D explicitly (the scale is D ** -0.5): a past of no cells has no size to infer D from
    head_dim = round(attrs["scale"] ** -2)
    shape = e.const([0, 0, kv_heads, head_dim], np.int64, f"/cuda/kv_shape_{head_dim}")
    pasts = []
    for which, joined in (("k", node.input[1]), ("v", node.input[2])):
        heads = e.node("Reshape", [joined, shape], f"{name}/{which}_past/Reshape")
        pasts.append(e.node("Transpose", [heads], f"{name}/{which}_past/Transpose",
                            perm=[0, 2, 1, 3]))  # [S, KV, N + Q, D]
    e.node("GroupQueryAttention", [node.input[0], new_k, new_v, *pasts, ATTN_SEQLENS, ATTN_TOTAL],
           name, outputs=[node.output[0], f"{name}/present_key", f"{name}/present_value"],
           domain=CONTRIB, num_heads=attrs["q_num_heads"], kv_num_heads=kv_heads,
           scale=attrs["scale"])
