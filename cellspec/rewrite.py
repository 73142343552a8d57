"""Rewrites of the attention (and the projections, the sampler's sorts and sums) in an exported
graph for a provider that runs it another way.

Both sides use it: the exporter (a TensorRT build parses standard ops) and the runtime (ONNX
Runtime's CUDA provider takes opset-23 `Attention` only in forms it has kernels for). A rewrite
returns a new in-memory model with the same inputs, outputs and initializers (initializers that
live in weights.bin stay references to it); only Attention nodes (and the nodes feeding them
that the new form makes dead) change, or in `sampling_for_cuda` CumSum and TopK nodes, or in
`projections_for_cuda` MatMul and Gemm nodes.

- `decompose_attention`: every Attention becomes standard ops: q as [S, KV, G, Q, D] (query
  head h reads kv head h // G, as transformers' repeat_kv), k/v as [S, KV, 1, ., D], scores in
  float32, Where(mask, scores, -inf), Softmax, Where(mask, probs, 0), MatMul, back to
  [S, Q, H * D]. Any provider runs it; it costs about fifteen nodes per attention.
- `attention_for_cuda`: ONNX Runtime's CUDA `GroupQueryAttention` (com.microsoft; flash or
  memory-efficient attention, float16/bfloat16, causal) takes a right-padded past
  [S, KV, T, D] with each row's valid length in `seqlens_k` (a device tensor: a captured CUDA
  graph replays it as it changes) and writes the Q new tokens after it, in place when the
  present has the past's shape. The target's causal attention over [cell_table cells ; new
  tokens] is exactly that with [cells ; new tokens] (T = N + Q) as the past: such nodes become
  GroupQueryAttention reading two new graph inputs the runtime
  feeds when a graph has them, `attn_seqlens [S]` int32 (lengths[s] + Q - 1) and `attn_total`
  int32 scalar (N + Q, in host memory, as the op wants it). The others (float32 inputs, sliding
  windows, the draft's non-causal blocks) are decomposed. (The opset-23 Attention's own CUDA
  grouped path reads a bool mask back to the host, which a CUDA graph cannot capture.)
- `attention_by_position` (`ort-cpu`, a target with a draft): its Attention over
  Concat(Gather(pool, cell_table), new) reads ScatterND(Gather(pool, cell_table), new_columns, new)
  instead, every key at the column of its position whether it is a cell or new in this step, plus
  one dummy query row that is dropped after. ONNX Runtime's CPU Attention sums keys in SIMD lanes
  fixed by their columns and rounds a query alone in its step another way
  (tests/runtime/test_cpu_attention_premises.py); in this form a token's logits are the same bit for
  bit whether it is fed in a verify or a later step, so speculation cannot change the text. The
  runtime feeds it through `by_position_feeds`.
- `cell_attention_for_cuda`: each Attention over Concat(Gather(pool, cell_table), new) becomes
  cellspec's own `CellAttention*` (domain "cellspec", cellspec/plugins/cell_attention.cu), which
  reads the cells where they lie in the pools: one node for the five, whose rounding depends on
  neither the batch, the cell bucket, nor (in the target, `by_position`) whether a key is new or
  a cell already. Attention in other forms is decomposed.
- `projections_for_cuda`: each float16/bfloat16 MatMul by a weight initializer, and the tied LM
  head's Gemm, as cellspec's `RowMatMul` (cellspec/plugins/cell_attention.cu): a single row (a
  decode step at batch 1) on its own kernel, a warp per output, where cuBLAS took 3.7 us per
  small GEMM on the H200 whatever its size; more rows go to cuBLAS. A MatMul's [K, N] weight is
  read through a Transpose node to [N, K], which ONNX Runtime folds into a new initializer at
  load. A SwiGlu of a RowMatMul's product becomes one `RowMatMulSwiGlu`.
- `sampling_for_cuda`: the sampler and verifier graphs' full sort and cumulative sums on
  cellspec's ops. Each float32 CumSum along the last axis becomes `SequentialCumSumFloat`: the
  same float32 sums, one add at a time in index order, in time linear in the axis where the CUDA
  provider's CumSum is quadratic (each output summed from the start). Each float32 TopK of a
  whole last axis (largest, sorted) becomes `SortDescendingFloat`: the same order, every row in
  one stable radix sort where the CUDA provider sorts one row at a time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cellspec import artifact as names

__all__ = ["ATTN_SEQLENS", "ATTN_TOTAL", "CELLSPEC_DOMAIN", "HOST_INPUTS", "NEW_COLUMNS",
           "attention_by_position", "attention_for_cuda", "by_position_feeds",
           "cell_attention_for_cuda", "decompose_attention", "grouped_feeds",
           "projections_for_cuda", "sampling_for_cuda"]

ATTN_SEQLENS = "attn_seqlens"  # int32 [S]: lengths[s] + Q - 1, GroupQueryAttention's seqlens_k
ATTN_TOTAL = "attn_total"  # int32 scalar: N + Q, its total_sequence_length (a host input)
HOST_INPUTS = (ATTN_TOTAL,)  # inputs a provider reads from host memory
NEW_COLUMNS = "new_columns"  # int64 [S, Q, 2]: (row, column) of each new token's key
_COLUMN_MULTIPLE = 64  # by-position steps read a multiple of this many columns

_HALF = (TensorProto.FLOAT16, TensorProto.BFLOAT16)
CONTRIB = "com.microsoft"
CELLSPEC_DOMAIN = "cellspec"
MAX_CELL_HEAD_DIM = 128  # the op's kernels give each lane of a head a thread of 128
SEQUENTIAL_CUMSUM = "SequentialCumSumFloat"
SORT_DESCENDING = "SortDescendingFloat"
ROW_MATMUL = "RowMatMul"  # + the type suffix of CELL_OPS
CELL_OPS = {TensorProto.FLOAT: "CellAttentionFloat", TensorProto.FLOAT16: "CellAttentionFloat16",
            TensorProto.BFLOAT16: "CellAttentionBFloat16"}


def grouped_feeds(lengths: np.ndarray, num_cells: int, width: int) -> dict[str, np.ndarray]:
    """The inputs `attention_for_cuda` adds, for rows whose sequences have `lengths` [S] cells
    in a step of `num_cells` cells read and `width` tokens per row: the total length is the
    past buffer's, N + Q, so that the present has the past's shape."""
    return {ATTN_SEQLENS: (lengths + width - 1).astype(np.int32),
            ATTN_TOTAL: np.array(num_cells + width, dtype=np.int32)}


class _Emitter:
    """Makes nodes and constants with names under a prefix (no name clashes with the graph's)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.constants: dict[str, TensorProto] = {}
        self.replaced: set[str] = set()  # names of nodes whose work emitted nodes took over

    def node(self, op: str, inputs: list[str], name: str, outputs: list[str] | None = None,
             domain: str = "", **attrs) -> str:
        outputs = outputs or [f"{name}_out"]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain or None,
                                           **attrs))
        return outputs[0]

    def const(self, values, dtype, name: str) -> str:
        if name not in self.constants:
            self.constants[name] = numpy_helper.from_array(np.asarray(values, dtype=dtype), name)
        return name


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
    position (module doc); other graphs as they are. Adds the input `new_columns`; the cell
    table and masks it reads then have the shapes `by_position_feeds` gives them. (A target
    without a draft never verifies, and by position costs its decoding 0-7% at batch 1 and
    about 10% at batch 8 with 4-bit weights; the profiler puts it in the dummy query.)"""
    if model.graph.name != "target" or all(o.name != names.TAPS for o in model.graph.output):
        return model
    used = []

    def rewrite(e: _Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = _gathered_past(node, producers)
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
                      outputs=[f"{name}/with_dummy"], **_attributes(node))
        e.node("Slice", [both, e.const([0], np.int64, "/by_position/zero"),
                         e.const([-1], np.int64, "/by_position/minus_one"),
                         e.const([1], np.int64, "/by_position/query_axis")],
               f"{name}/Slice", outputs=[node.output[0]])
        used.append(name)

    result = _rewrite(model, rewrite)
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
    return _rewrite(model, lambda e, node, producers: _decompose(e, node))


def attention_for_cuda(model: onnx.ModelProto, dtypes: tuple[int, ...] = _HALF
                       ) -> onnx.ModelProto:
    """`model` with each Attention in a form the CUDA provider has a kernel for (module doc);
    `dtypes`: the activation types GroupQueryAttention takes (the CPU's takes float32 too)."""
    # only the target's attention is causal (a draft block sees its whole block)
    grouped = _activation_type(model) in dtypes and model.graph.name == "target"
    used = []

    def rewrite(e: _Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = _gathered_past(node, producers)
        causal_target = node.input[3] == "attn_mask"  # windowed layers read attn_mask_window
        if past is not None and causal_target and grouped:
            _grouped(e, node, *past)
            used.append(node.name)
        else:
            _decompose(e, node)

    result = _rewrite(model, rewrite)
    if used:
        result.graph.input.extend([
            helper.make_tensor_value_info(ATTN_SEQLENS, TensorProto.INT32, ["S"]),
            helper.make_tensor_value_info(ATTN_TOTAL, TensorProto.INT32, [])])
        _import_domain(result, CONTRIB)
    return result


def cell_attention_for_cuda(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each Attention over gathered cells as cellspec's CellAttention op (module
    doc); keys are ordered by position in the target's causal attention (attn_mask or
    attn_mask_window: a row's new tokens come after its cells), by column in a draft block.
    Where q, k and v are Slices of one projection, q and k rotated (and Qwen3's head norms
    before), the op takes the projection (CellRotaryAttention, CellNormRotaryAttention) and the
    Slices and rotations go; SiLU-gated products of a projection's two halves become SwiGlu."""
    dtype = _activation_type(model)
    op = CELL_OPS.get(dtype)
    by_position = int(model.graph.name == "target")
    initializers = {i.name: i for i in model.graph.initializer}
    readers: dict[str, set[str]] = {}
    for n in model.graph.node:
        for name in n.input:
            readers.setdefault(name, set()).add(n.name)
    used = []

    def rewrite(e: _Emitter, node: onnx.NodeProto, producers: dict) -> None:
        past = _gathered_past(node, producers)
        attrs = _attributes(node)
        if op is None or past is None or not _fits_cell_kernels(round(attrs["scale"] ** -2),
                                                                  dtype):
            _decompose(e, node)
            return
        _, new_k, _, new_v = past
        k_pool, v_pool = (producers[name].input[0] for name in (past[0], past[2]))
        cells = [k_pool, v_pool, "cell_table", node.input[3], "positions"]
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
            e.node(kind + op[len("CellAttention"):],
                   [rotary.qkv, *rotary.caches, *cells, *rotary.norms], node.name,
                   outputs=[node.output[0], new_k, new_v, f"{node.name}/q",
                            f"{node.name}/partials"],
                   **common, **({"epsilon": rotary.epsilon} if rotary.norms else {}))
            e.replaced.update(rotary.replaced)
        used.append(node.name)

    result = _rewrite(model, rewrite)
    if used:
        _import_domain(result, CELLSPEC_DOMAIN)
    if op is not None:
        _fuse_swiglu(result, "SwiGlu" + op[len("CellAttention"):])
    return result


def sampling_for_cuda(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each float32 CumSum along its input's last axis, neither exclusive nor
    reversed, as cellspec's SequentialCumSumFloat, and each float32 TopK of its input's whole
    last axis, largest first and sorted, as SortDescendingFloat (module doc); other CumSums and
    TopKs stay."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type for v in (*inferred.graph.value_info,
                                                  *inferred.graph.input)}
    initializers = {i.name: i for i in model.graph.initializer}
    result = onnx.ModelProto()
    result.CopyFrom(model)
    changed = False
    for node in result.graph.node:
        tensor = types.get(node.input[0]) if node.op_type in ("CumSum", "TopK") else None
        if tensor is None or tensor.elem_type != TensorProto.FLOAT \
                or not tensor.HasField("shape"):
            continue
        dims, attrs = tensor.shape.dim, _attributes(node)
        if node.op_type == "CumSum":
            axis = _constant(node.input[1], initializers)
            if axis not in ([len(dims) - 1], [-1]) or attrs.get("exclusive") \
                    or attrs.get("reverse"):
                continue
            node.op_type = SEQUENTIAL_CUMSUM
        else:
            whole = dims[-1].HasField("dim_value") and \
                _constant(node.input[1], initializers) == [dims[-1].dim_value]
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
        _import_domain(result, CELLSPEC_DOMAIN)
    return result


def projections_for_cuda(model: onnx.ModelProto, dtypes: tuple[int, ...] = _HALF
                         ) -> onnx.ModelProto:
    """`model` with each MatMul of an activation by a 2-D initializer weight [K, N] of a type in
    `dtypes` as cellspec's RowMatMul of the weight's Transpose (a node on an initializer, which
    ONNX Runtime folds when it loads the graph), and each Gemm x @ w^T (transB, no C, alpha 1:
    the tied LM head) as RowMatMul of w as it is, and a SwiGlu of a RowMatMul's product (from
    cell_attention_for_cuda) as one RowMatMulSwiGlu (module doc); other nodes stay."""
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
        attrs = _attributes(node)
        op = ROW_MATMUL + CELL_OPS[weight.data_type][len("CellAttention"):]
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
    result.graph.node.extend(_fuse_row_swiglu(nodes, {o.name for o in model.graph.output}))
    if changed:
        _import_domain(result, CELLSPEC_DOMAIN)
    return result


def _fuse_row_swiglu(nodes: list[onnx.NodeProto], outputs: set[str]) -> list[onnx.NodeProto]:
    """SwiGlu(RowMatMul(x, w)) -> RowMatMulSwiGlu(x, w) (outputs: SwiGlu's, scratch) where
    nothing else reads the product, at the SwiGlu's place, under the RowMatMul's name."""
    readers: dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    products = {n.output[0]: n for n in nodes if n.op_type.startswith(ROW_MATMUL)
                and n.domain == CELLSPEC_DOMAIN}
    fused, gone = {}, set()
    for node in nodes:
        row = products.get(node.input[0]) if node.input else None
        if node.op_type.startswith("SwiGlu") and node.domain == CELLSPEC_DOMAIN and row \
                and readers[row.output[0]] == 1 and row.output[0] not in outputs \
                and node.op_type[len("SwiGlu"):] == row.op_type[len(ROW_MATMUL):]:
            fused[node.name] = helper.make_node(
                row.op_type.replace(ROW_MATMUL, ROW_MATMUL + "SwiGlu"), list(row.input),
                [node.output[0], f"{row.name}/scratch"], name=row.name, domain=CELLSPEC_DOMAIN)
            gone.add(row.name)
    return [fused.get(n.name, n) for n in nodes if n.name not in gone]


def _import_domain(model: onnx.ModelProto, domain: str) -> None:
    """Version 1 of `domain` among the model's opset imports, unless it is there already."""
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, 1))


def _constant(name: str, initializers: dict) -> list | None:
    found = initializers.get(name)
    return None if found is None else numpy_helper.to_array(found).reshape(-1).tolist()


def _slice_of(name: str, producers: dict, initializers: dict) -> tuple[str, int, int] | None:
    """(x, start, end) when `name` is Slice(x, [start], [end], [-1]) (no steps)."""
    node = producers.get(name)
    if node is None or node.op_type != "Slice" or len(node.input) != 4:
        return None
    start, end, axes = (_constant(i, initializers) for i in node.input[1:])
    if axes != [-1] or start is None or end is None or len(start) != 1 or len(end) != 1:
        return None
    return node.input[0], start[0], end[0]


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
           or _attributes(r).get("interleaved", 0) != 0
           or _attributes(r).get("rotary_embedding_dim", 0) not in (0, head_dim) for r in ropes):
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
                    _attributes(norm).get("axis", -1) != -1:
                return None
            norms.append(norm.input[1])
            epsilons.add(_attributes(norm).get("epsilon", 1e-5))
            replaced += [producers[x].name, norm.name, split.name]
            x = split.input[0]
        slices.append(x)
    slices.append(v)
    found = [_slice_of(name, producers, initializers) for name in slices]
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
                    halves = [_slice_of(n, producers, initializers) for n in (gate, up)]
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
    model.graph.node.extend(_live(nodes, {o.name for o in model.graph.output}))
    _import_domain(model, CELLSPEC_DOMAIN)


def _fits_cell_kernels(head_dim: int, dtype: int | None) -> bool:
    """The CellAttention kernels take heads of at most 128 lanes, rows of 16-byte multiples."""
    itemsize = 4 if dtype == TensorProto.FLOAT else 2
    return head_dim <= MAX_CELL_HEAD_DIM and head_dim * itemsize % 16 == 0


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
    nodes = [node for node in nodes if node.name not in emitter.replaced]
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
    """GroupQueryAttention with the past and present in one buffer: [cells ; new tokens]
    [S, KV, N + Q, D] (the Concat the target already makes) is the past, each row's valid
    length lengths[s]; the op writes the new tokens at lengths[s] in place (ONNX Runtime
    reuses the past's buffer for the present, which must then have its shape) and attends
    causally over the first lengths[s] + Q."""
    attrs = _attributes(node)
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


def _activation_type(model: onnx.ModelProto) -> int | None:
    """The model dtype: the element type of its KV pools (k_pool.0), None without pools."""
    pools = [v for v in model.graph.input if v.name.startswith("k_pool.")]
    return pools[0].type.tensor_type.elem_type if pools else None
