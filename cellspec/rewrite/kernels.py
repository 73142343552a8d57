"""The sampler's sorts and sums, and the float16/bfloat16 projections, as cellspec's CUDA ops
(the package doc)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cellspec.rewrite.graph import (
    CELLSPEC_DOMAIN,
    HALF,
    TYPE_SUFFIX,
    constant_values,
    import_domain,
    node_attributes,
)

SEQUENTIAL_CUMSUM = "SequentialCumSumFloat"
SEQUENTIAL_CUMSUM_UNTIL = "SequentialCumSumUntilFloat"
SORT_DESCENDING = "SortDescendingFloat"
TOP_LOG_SOFTMAX = "TopLogSoftmaxFloat"
MAX_TOP_K = 8  # the most choices a row TopLogSoftmax takes (cell_attention.cu: kMaxTop)
ROW_MATMUL = "RowMatMul"  # + TYPE_SUFFIX


def sampling_for_cuda(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each float32 CumSum along its input's last axis, neither exclusive nor
    reversed, as cellspec's SequentialCumSumFloat, and each float32 TopK of its input's whole
    last axis, largest first and sorted, as SortDescendingFloat (the package doc); other CumSums and
    TopKs stay. A CumSum y of x read only as the sampler's top-p rule reads it (`top_p_limit`)
    becomes SequentialCumSumUntilFloat(x, top_p): its rows stop where the rule stops reading."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type for v in (*inferred.graph.value_info,
                                                  *inferred.graph.input)}
    initializers = {i.name: i for i in model.graph.initializer}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    changed = False
    readers = _readers(result.graph.node)
    outputs = {o.name for o in result.graph.output}
    for node in result.graph.node:
        tensor = types.get(node.input[0]) if node.op_type in ("CumSum", "TopK") else None
        if tensor is None or tensor.elem_type != TensorProto.FLOAT \
                or not tensor.HasField("shape"):
            continue
        dims, attrs = tensor.shape.dim, node_attributes(node)
        if node.op_type == "CumSum":
            axis = constant_values(node.input[1], initializers)
            if axis not in ([len(dims) - 1], [-1]) or attrs.get("exclusive") \
                    or attrs.get("reverse"):
                continue
            node.op_type = SEQUENTIAL_CUMSUM
            limit = top_p_limit(node, readers, outputs)
            if limit is not None:
                node.op_type = SEQUENTIAL_CUMSUM_UNTIL
                node.input[1] = limit
                node.domain = CELLSPEC_DOMAIN
                del node.attribute[:]
                changed = True
                continue
        else:
            whole = dims[-1].HasField("dim_value") and \
                constant_values(node.input[1], initializers) == [dims[-1].dim_value]
            if not whole or attrs.get("axis", -1) not in (-1, len(dims) - 1) \
                    or attrs.get("largest", 1) != 1 or attrs.get("sorted", 1) != 1:
                continue
            node.op_type = SORT_DESCENDING
            node.output.append(f"{node.name}/scratch")
        node.domain = CELLSPEC_DOMAIN
        del node.input[1:]
        del node.attribute[:]
        changed = True
    if changed:
        import_domain(result, CELLSPEC_DOMAIN)
    return result


def _readers(nodes) -> dict[str, list[onnx.NodeProto]]:
    """Each tensor name's reading nodes, in graph order."""
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in nodes:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    return readers


def top_p_limit(node: onnx.NodeProto, readers: dict[str, list[onnx.NodeProto]],
                outputs: set[str]) -> str | None:
    """The top_p of a CumSum y = cumsum(x) that is read as export/sampler.py's top-p rule reads
    it, else None. The rule: keep = (y - x < top_p or rank 0) and ...; the kept mass is y at the
    last kept rank; a draw is the first kept rank with y > threshold. Every read of y is a Sub
    y - x whose one reader is Less(y - x, top_p), a GatherElements, or Greater(y, ...) ANDed
    with a keep; no read of y past the first rank whose y - x reaches top_p changes the graph's
    output (x sorted descending makes y - x never decrease: _emit_inverse_cdf), so those sums
    may be anything there (SequentialCumSumUntil writes +inf)."""
    y, x = node.output[0], node.input[0]
    if y in outputs:
        return None
    limit = None
    for reader in readers.get(y, []):
        if reader.op_type == "Sub" and list(reader.input) == [y, x]:
            less = readers.get(reader.output[0], [])
            if len(less) != 1 or less[0].op_type != "Less" or less[0].input[0] != reader.output[0]:
                return None
            limit = less[0].input[1]
        elif reader.op_type == "GatherElements" and reader.input[0] == y:
            continue
        elif reader.op_type == "Greater" and reader.input[0] == y and all(
                r.op_type == "And" for r in readers.get(reader.output[0], [])):
            continue
        else:
            return None
    return limit


def top_choices_for_cuda(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each TopK (largest, sorted, k a constant in 1..MAX_TOP_K) along the last axis
    of a float32 LogSoftmax along its input's last axis, read by that TopK alone, as one
    cellspec TopLogSoftmaxFloat of the LogSoftmax's input: draft_block's tree choices (top_ids,
    top_logp) in one kernel of a block a row, where the CUDA provider's LogSoftmax and TopK took
    several (the package doc); other LogSoftmax and TopK nodes stay."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type for v in (*inferred.graph.value_info,
                                                  *inferred.graph.input, *inferred.graph.output)}
    initializers = {i.name: i for i in model.graph.initializer}
    readers = _readers(model.graph.node)
    producers = {o: n for n in model.graph.node for o in n.output}
    outputs = {o.name for o in model.graph.output}
    fused, gone = {}, set()  # by id(): the TopK's replacement, the LogSoftmaxes dropped
    for node in model.graph.node:
        if node.op_type != "TopK" or node.domain not in ("", "ai.onnx"):
            continue
        soft = producers.get(node.input[0])
        if soft is None or soft.op_type != "LogSoftmax" or soft.domain not in ("", "ai.onnx") \
                or readers.get(soft.output[0]) != [node] or soft.output[0] in outputs:
            continue
        # the logits' type, or (where inference stops at a contrib op, as in draft_block: a type
        # without a shape) the declared type of the TopK's values: LogSoftmax's element type,
        # and the same rank
        tensor = next((t for t in (types.get(soft.input[0]), types.get(node.output[0]))
                       if t is not None and t.HasField("shape")), None)
        if tensor is None or tensor.elem_type != TensorProto.FLOAT:
            continue
        rank = len(tensor.shape.dim)
        attrs, soft_axis = node_attributes(node), node_attributes(soft).get("axis", -1)
        k = constant_values(node.input[1], initializers)
        if soft_axis not in (-1, rank - 1) or attrs.get("axis", -1) not in (-1, rank - 1) \
                or attrs.get("largest", 1) != 1 or attrs.get("sorted", 1) != 1 \
                or k is None or len(k) != 1 or not 1 <= k[0] <= MAX_TOP_K:
            continue
        fused[id(node)] = helper.make_node(
            TOP_LOG_SOFTMAX, [soft.input[0]], list(node.output), name=node.name,
            domain=CELLSPEC_DOMAIN, k=int(k[0]))
        gone.add(id(soft))
    if not fused:
        return model
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(fused.get(id(n), n) for n in model.graph.node if id(n) not in gone)
    import_domain(result, CELLSPEC_DOMAIN)
    return result


def projections_for_cuda(model: onnx.ModelProto, dtypes: tuple[int, ...] = HALF
                         ) -> onnx.ModelProto:
    """`model` with each MatMul of an activation by a 2-D initializer weight [K, N] of a type in
    `dtypes` as cellspec's RowMatMul of the weight's Transpose (a node on an initializer, which
    ONNX Runtime folds when it loads the graph), and each Gemm x @ w^T (transB, no C, alpha 1:
    the tied LM head) as RowMatMul of w as it is, and a SwiGlu of a RowMatMul's product (from
    cell_attention_for_cuda) as one RowMatMulSwiGlu, and a CellRotaryAttention of a RowMatMul's
    product as RowMatMulRotary (the projection with the rotation in its epilogue) and
    CellAttention (the package doc); other nodes stay."""
    initializers = {i.name: i for i in model.graph.initializer}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    nodes, transposed, changed = [], set(), False
    for node in model.graph.node:
        weight = initializers.get(node.input[1]) if len(node.input) > 1 else None
        if weight is None or len(weight.dims) != 2 or weight.data_type not in dtypes \
                or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        attrs = node_attributes(node)
        op = ROW_MATMUL + TYPE_SUFFIX[weight.data_type]
        if node.op_type == "MatMul":
            w = f"{weight.name}/T"
            if w not in transposed:
                nodes.append(helper.make_node("Transpose", [weight.name], [w],
                                              name=f"{weight.name}/Transpose", perm=[1, 0]))
                transposed.add(w)
        elif node.op_type == "Gemm" and len(node.input) == 2 and attrs.get("transB") == 1 \
                and not attrs.get("transA") and attrs.get("alpha", 1.0) == 1.0:
            w = weight.name
        else:
            nodes.append(node)
            continue
        nodes.append(helper.make_node(op, [node.input[0], w], list(node.output), name=node.name,
                                      domain=CELLSPEC_DOMAIN))
        changed = True
    del result.graph.node[:]
    outputs = {o.name for o in model.graph.output}
    nodes, tiling = _tile_weights(_fuse_row_rotary(_fuse_row_swiglu(nodes, outputs), outputs),
                                  initializers, outputs)
    result.graph.node.extend(nodes)
    result.graph.initializer.extend(tiling)
    if changed:
        import_domain(result, CELLSPEC_DOMAIN)
    return result


def rotary_row_order(heads: int, kv_heads: int, head_dim: int) -> np.ndarray:
    """The order of a q, k, v projection's weight rows [(heads + 2 kv_heads) head_dim] that
    RowMatMulRotary's kernel reads a tiled weight in: each tile of 8 outputs of a q or k head
    takes the 4 rotation pairs (d, d + head_dim / 2), d = 4 j .. 4 j + 3, as rows (d, d + half,
    d + 1, d + 1 + half, ...); the v rows stay in place (cell_attention.cu, row_matmul_kernel)."""
    half = head_dim // 2
    tiles = np.arange((heads + kv_heads) * head_dim // 8)
    g = np.arange(8)
    head, j = (tiles // (half // 4))[:, None], (tiles % (half // 4))[:, None]
    rotated = (head * head_dim + j * 4 + g // 2 + (g % 2) * half).reshape(-1)
    return np.concatenate([rotated, np.arange(len(rotated), (heads + 2 * kv_heads) * head_dim)])


def _tile_weights(nodes: list[onnx.NodeProto], initializers: dict, outputs: set[str]
                  ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """Each RowMatMul* whose weight is an initializer's Transpose (a MatMul's [K, N]) or, read by
    no other node, an initializer [N, K] (an untied LM head), with K a multiple of 32 and N of 8
    (RowMatMulSwiGlu's N / 2 of 8, RowMatMulRotary's head dim of 8), reads that weight tiled
    instead: [N / 8, K / 32, 8, 32], for RowMatMulSwiGlu [N / 16, K / 32, 2, 8, 32] (each chunk's
    gate and up rows side by side). A Reshape and a Transpose of the initializer (after a Gather
    of RowMatMulRotary's rows into rotary_row_order) give it, which ONNX Runtime folds into a new
    initializer at load, as it folds the Transpose it replaces. The kernel's loads of a chunk are
    then 512 contiguous bytes a set (bench/NOTES.md, 2026-12-04, eighth sitting: 8 Qwen3-8B-shaped
    layers' projections and head on the H200); its sums, and so every output, stay the same bit
    for bit. A tied head (its initializer also the embedding's) keeps its layout: tiling would
    keep a second copy on the device. Returns the nodes and the initializers the tiling adds."""
    readers = _readers(nodes)
    producers = {o: n for n in nodes for o in n.output}
    added, gone, out, retargeted = {}, set(), [], {}
    for node in nodes:
        kind = node.op_type[len(ROW_MATMUL):]
        if node.domain != CELLSPEC_DOMAIN or not node.op_type.startswith(ROW_MATMUL) \
                or len(node.input) < 2 or node.input[1] in outputs:
            continue
        weight, source = node.input[1], producers.get(node.input[1])
        if source is not None and source.op_type == "Transpose" \
                and source.input[0] in initializers and len(readers[weight]) == 1:
            init = initializers[source.input[0]]
            K, N = init.dims
            transposed = True
        elif weight in initializers and len(readers[weight]) == 1 \
                and len(initializers[weight].dims) == 2:
            init = initializers[weight]
            N, K = init.dims
            transposed = False
        else:
            continue
        order = None
        if kind.startswith("Rotary"):
            attrs = node_attributes(node)
            H, KV = attrs["num_heads"], attrs["kv_num_heads"]
            D = N // (H + 2 * KV) if H > 0 and KV > 0 else 0
            if D == 0 or D % 8 != 0 or N != (H + 2 * KV) * D:
                continue
            order = rotary_row_order(H, KV, D)
        if K % 32 != 0 or N % 8 != 0 or (kind.startswith("SwiGlu") and (N // 2) % 8 != 0):
            continue
        name = f"{init.name}/tiled"
        steps = []
        source_name = init.name
        if order is not None:
            steps.append(helper.make_node("Gather", [source_name, f"{name}/rows"],
                                          [f"{name}/ordered"], name=f"{name}/Gather",
                                          axis=1 if transposed else 0))
            added[f"{name}/rows"] = numpy_helper.from_array(order.astype(np.int64),
                                                            f"{name}/rows")
            source_name = f"{name}/ordered"
        if kind.startswith("SwiGlu"):  # [N / 16, K / 32, 2, 8, 32]: gate and up side by side
            shape, perm = (([K // 32, 32, 2, N // 16, 8], [3, 0, 2, 4, 1]) if transposed else
                           ([2, N // 16, 8, K // 32, 32], [1, 3, 0, 2, 4]))
        else:  # [N / 8, K / 32, 8, 32]
            shape, perm = (([K // 32, 32, N // 8, 8], [2, 0, 3, 1]) if transposed else
                           ([N // 8, 8, K // 32, 32], [0, 2, 1, 3]))
        added[f"{name}/shape"] = numpy_helper.from_array(np.array(shape, np.int64),
                                                         f"{name}/shape")
        steps += [helper.make_node("Reshape", [source_name, f"{name}/shape"],
                                   [f"{name}/blocks"], name=f"{name}/Reshape"),
                  helper.make_node("Transpose", [f"{name}/blocks"], [name],
                                   name=f"{name}/Transpose", perm=perm)]
        if source is not None and transposed:
            gone.add(source.name)
        copy = onnx.NodeProto()  # the caller's node stays as it was
        copy.CopyFrom(node)
        copy.input[1] = name
        retargeted[id(node)] = copy
        out.extend(steps)
    out.extend(retargeted.get(id(n), n) for n in nodes if n.name not in gone)
    return out, list(added.values())


def _sole_products(nodes: list[onnx.NodeProto], outputs: set[str]) -> dict[str, onnx.NodeProto]:
    """The plain RowMatMul* nodes by their product's name, where one node input reads that
    product and it is no graph output: what a fusion may take into its reader."""
    readers = _readers(nodes)
    return {n.output[0]: n for n in nodes if n.domain == CELLSPEC_DOMAIN
            and n.op_type.startswith(ROW_MATMUL)
            and n.op_type[len(ROW_MATMUL):] in TYPE_SUFFIX.values()
            and len(readers.get(n.output[0], [])) == 1 and n.output[0] not in outputs}


def _fuse_row_swiglu(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """SwiGlu(RowMatMul(x, w)) -> RowMatMulSwiGlu(x, w) (outputs: SwiGlu's, scratch) where
    nothing else reads the product, at the SwiGlu's place, under the RowMatMul's name."""
    products = _sole_products(nodes, outputs)
    fused, gone = {}, set()
    for node in nodes:
        row = products.get(node.input[0]) if node.input else None
        if node.op_type.startswith("SwiGlu") and node.domain == CELLSPEC_DOMAIN and row \
                and node.op_type[len("SwiGlu"):] == row.op_type[len(ROW_MATMUL):]:
            fused[node.name] = helper.make_node(
                row.op_type.replace(ROW_MATMUL, ROW_MATMUL + "SwiGlu"), list(row.input),
                [node.output[0], f"{row.name}/scratch"], name=row.name, domain=CELLSPEC_DOMAIN)
            gone.add(row.name)
    return [fused.get(n.name, n) for n in nodes if n.name not in gone]


def _fuse_row_rotary(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """CellRotaryAttention(RowMatMul(x, w), cos, sin, cells...) -> RowMatMulRotary(x, w, cos,
    sin, positions) (outputs: the attention's rotated q, k_new and v_new, scratch; under the
    RowMatMul's name) and CellAttention(q, k_new, v_new, cells...) (outputs: the attention's out
    and partials; under its name), both at the attention's place, where nothing else reads the
    product. The rotation moves into the projection's epilogue, the same arithmetic bit for bit
    (cellspec/plugins/cell_attention.cu), one kernel fewer per layer. Head norms
    (CellNormRotaryAttention) need a whole head's sums, so those stay."""
    products = _sole_products(nodes, outputs)
    fused, gone = {}, set()
    for node in nodes:
        suffix = node.op_type[len("CellRotaryAttention"):]
        row = products.get(node.input[0]) if node.op_type.startswith("CellRotaryAttention") \
            and node.domain == CELLSPEC_DOMAIN else None
        if row is None or row.op_type != ROW_MATMUL + suffix:
            continue
        attrs = node_attributes(node)
        heads = dict(num_heads=attrs["num_heads"], kv_num_heads=attrs["kv_num_heads"])
        q, k_new, v_new = node.output[3], node.output[1], node.output[2]
        fused[node.name] = [
            helper.make_node(ROW_MATMUL + "Rotary" + suffix,
                             [*row.input, node.input[1], node.input[2], node.input[7]],
                             [q, k_new, v_new, f"{row.name}/scratch"], name=row.name,
                             domain=CELLSPEC_DOMAIN, **heads),
            helper.make_node("CellAttention" + suffix, [q, k_new, v_new, *node.input[3:8]],
                             [node.output[0], node.output[4]], name=node.name,
                             domain=CELLSPEC_DOMAIN, **heads, scale=attrs["scale"],
                             by_position=attrs["by_position"])]
        gone.add(row.name)
    return [m for n in nodes if n.name not in gone for m in fused.get(n.name, [n])]
