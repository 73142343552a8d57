"""Attention over cells as cellspec's CellAttention ops, with the rotation (and Qwen3's head
norms) of a fused projection taken in, and SiLU-gated products as SwiGlu (the package doc)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from cellspec.rewrite.attention import decompose_node
from cellspec.rewrite.graph import (
    CELL_OPS,
    CELLSPEC_DOMAIN,
    TYPE_SUFFIX,
    Emitter,
    activation_type,
    gathered_past,
    import_domain,
    live_nodes,
    node_attributes,
    rewrite_attention,
    slice_of,
)

MAX_CELL_HEAD_DIM = 128  # the op's kernels give each lane of a head a thread of 128


def cell_attention_for_cuda(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Attention over gathered cells as cellspec's CellAttention op (module
    doc); keys are ordered by position in the target's causal attention (attn_mask or
    attn_mask_window: a row's new tokens come after its cells), by column in a draft block.
    Where q, k and v are Slices of one projection, q and k rotated (and Qwen3's head norms
    before), the op takes the projection (CellRotaryAttention, CellNormRotaryAttention) and the
    Slices and rotations go; SiLU-gated products of a projection's two halves become SwiGlu."""
    dtype = activation_type(model)
    op, suffix = CELL_OPS.get(dtype), TYPE_SUFFIX.get(dtype)
    by_position = int(model.graph.name == "target")
    initializers = {i.name: i for i in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input}
    readers: dict[str, set[str]] = {}
    for n in model.graph.node:
        for name in n.input:
            readers.setdefault(name, set()).add(n.name)
    used = []

    def rewrite(e: Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = gathered_past(node, producers)
        attrs = node_attributes(node)
        if op is None or past is None or not _fits_cell_kernels(round(attrs["scale"] ** -2),
                                                                  dtype):
            decompose_node(e, node)
            return
        _, new_k, _, new_v = past
        k_pool, v_pool = (producers[name].input[0] for name in (past[0], past[2]))
        cells = [k_pool, v_pool, "cell_table", node.input[3], "positions"]
        if not graph_inputs.issuperset(cells):
            # the op's overlapped launch reads the cell table, the mask and the positions before
            # it waits for the step's previous kernel, so no node of the step may write them
            # (cell_attention.cu, pair_kernel); the pools are committed between steps
            decompose_node(e, node)
            return
        common = dict(domain=CELLSPEC_DOMAIN, num_heads=attrs["q_num_heads"],
                      kv_num_heads=attrs["kv_num_heads"], scale=attrs["scale"],
                      by_position=by_position)
        rotary = _rotary_qkv(node.input[0], new_k, new_v, attrs, producers, initializers)
        if rotary is not None:  # only the attention and its cell Concats may read what goes
            allowed = {*rotary.replaced, node.name, *(producers[n].name for n in node.input[1:3])}
            outputs = {o for n in model.graph.node if n.name in rotary.replaced for o in n.output}
            if any(readers.get(o, set()) - allowed for o in outputs):
                rotary = None
        if rotary is None:
            e.node(op, [node.input[0], new_k, new_v, *cells], node.name,
                   outputs=[node.output[0], f"{node.name}/partials"], **common)
        else:
            kind = "CellNormRotaryAttention" if rotary.norms else "CellRotaryAttention"
            e.node(kind + suffix,
                   [rotary.qkv, *rotary.caches, *cells, *rotary.norms], node.name,
                   outputs=[node.output[0], new_k, new_v, f"{node.name}/q",
                            f"{node.name}/partials"],
                   **common, **({"epsilon": rotary.epsilon} if rotary.norms else {}))
            e.replaced.update(rotary.replaced)
        used.append(node.name)

    result = rewrite_attention(model, rewrite)
    if used:
        import_domain(result, CELLSPEC_DOMAIN)
    if op is not None:
        _fuse_swiglu(result, "SwiGlu" + suffix)
    return result


class _RotaryQkv(NamedTuple):
    qkv: str  # the projection q, k and v are sliced from
    caches: tuple[str, str]  # cos, sin
    norms: list[str]  # q_norm, k_norm weights, or none
    epsilon: float | None
    replaced: list[str]  # the Slices, norms and rotations the op takes over


def _rotary_qkv(q: str, k: str, v: str, attrs: dict, producers: dict,
                initializers: dict) -> _RotaryQkv | None:
    """The fused form's parts (_RotaryQkv) when q and k are RotaryEmbedding (not
    interleaved, whole heads, at `positions`) of the first two thirds [H*D | KV*D | KV*D] of one
    projection qkv, each optionally through Reshape -> RMSNormalization over D -> Reshape (both
    or neither), and v its last Slice; else None."""
    heads, kv_heads = attrs["q_num_heads"], attrs["kv_num_heads"]
    head_dim = round(attrs["scale"] ** -2)
    ropes = [producers.get(name) for name in (q, k)]
    if any(r is None or r.op_type != "RotaryEmbedding" or r.input[3] != "positions"
           or node_attributes(r).get("interleaved", 0) != 0
           or node_attributes(r).get("rotary_embedding_dim", 0) not in (0, head_dim)
           for r in ropes):
        return None
    caches = tuple(ropes[0].input[1:3])
    if tuple(ropes[1].input[1:3]) != caches:
        return None
    replaced, norms, epsilons, slices = [r.name for r in ropes], [], set(), []
    for rope in ropes:
        x = rope.input[0]
        norm = producers.get(producers[x].input[0]) if producers.get(x) is not None and \
            producers[x].op_type == "Reshape" else None
        if norm is not None and norm.op_type == "RMSNormalization":
            split = producers.get(norm.input[0])
            if split is None or split.op_type != "Reshape" or \
                    node_attributes(norm).get("axis", -1) != -1:
                return None
            norms.append(norm.input[1])
            epsilons.add(node_attributes(norm).get("epsilon", 1e-5))
            replaced += [producers[x].name, norm.name, split.name]
            x = split.input[0]
        slices.append(x)
    slices.append(v)
    found = [slice_of(name, producers, initializers) for name in slices]
    if len(norms) not in (0, 2) or len(epsilons) > 1 or any(f is None for f in found) or \
            len({f[0] for f in found}) != 1:
        return None
    edges = np.cumsum([0, heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]).tolist()
    if [(f[1], f[2]) for f in found] != list(zip(edges[:-1], edges[1:])):
        return None
    cos_dims = initializers[caches[0]].dims if caches[0] in initializers else None
    if cos_dims is None or list(cos_dims)[1:] != [head_dim // 2]:
        return None
    replaced += [producers[name].name for name in slices]
    return _RotaryQkv(found[0][0], caches, norms, epsilons.pop() if norms else None, replaced)


def _fuse_swiglu(model: onnx.ModelProto, op: str) -> None:
    """Mul(Mul(a, Sigmoid(a)), b) with a, b the two halves of one x (Slices of its last axis)
    -> op(x), in place; the Slices and Sigmoid go when nothing else reads them."""
    producers = {out: node for node in model.graph.node for out in node.output}
    initializers = {i.name: i for i in model.graph.initializer}
    nodes, count = [], 0
    for node in model.graph.node:
        fused = None
        if node.op_type == "Mul" and node.domain in ("", "ai.onnx"):
            for act, up in (node.input, node.input[::-1]):
                silu = producers.get(act)
                if silu is None or silu.op_type != "Mul":
                    continue
                for gate, sig in (silu.input, silu.input[::-1]):
                    sigmoid = producers.get(sig)
                    if sigmoid is None or sigmoid.op_type != "Sigmoid" or \
                            sigmoid.input[0] != gate:
                        continue
                    halves = [slice_of(n, producers, initializers) for n in (gate, up)]
                    if None in halves or halves[0][0] != halves[1][0]:
                        continue
                    (x, start, mid), (_, mid2, end) = halves
                    if start == 0 and mid == mid2 and end == 2 * mid:
                        fused = helper.make_node(op, [x], [node.output[0]], name=node.name,
                                                 domain=CELLSPEC_DOMAIN)
        nodes.append(fused or node)
        count += fused is not None
    if not count:
        return
    del model.graph.node[:]
    model.graph.node.extend(live_nodes(nodes, {o.name for o in model.graph.output}))
    import_domain(model, CELLSPEC_DOMAIN)


def _fits_cell_kernels(head_dim: int, dtype: int | None) -> bool:
    """The CellAttention kernels take heads of at most 128 lanes, rows of 16-byte multiples."""
    itemsize = 4 if dtype == TensorProto.FLOAT else 2
    return head_dim <= MAX_CELL_HEAD_DIM and head_dim * itemsize % 16 == 0
