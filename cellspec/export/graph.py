"""A small ONNX graph builder and the reusable `make_*` primitives the graphs are made of.

Every primitive takes the builder, tensor names and a node-name prefix such as `/layers.3/attn`
and returns the name of its output. The graphs use ai.onnx opset 23 (RMSNormalization,
RotaryEmbedding, Attention) and two ONNX Runtime contrib ops that fold work away:
`SkipSimplifiedLayerNormalization` (the residual add inside the norm) and `MatMulNBits` (4-bit
weights, export/quant.py). Activations are in `builder.dtype`; norms and softmax compute their
statistics in float32 inside the ops; logits are float32.

Shapes: S = rows (sequences) of the step, Q = tokens per row, N = cells read per row,
H = query heads, KV = key/value heads, D = head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cellspec.export.weights import ONNX_DTYPES

OPSET = 23
CONTRIB = "com.microsoft"


@dataclass(frozen=True)
class QuantLinear:
    """A block-quantized [in, out] projection as MatMulNBits consumes it (export/quant.py and
    quant_graph.py name the initializers `{prefix}.qweight`, `.scales`, `.zero_points`,
    `.offsets`)."""

    prefix: str
    in_features: int  # K
    out_features: int  # N
    bits: int
    block_size: int
    has_offsets: bool  # Q4_1's per-block minimum: y += (block sums of x) @ offsets
    has_zero_points: bool = True  # False: every code's zero point is MatMulNBits' default

    def initializer(self, suffix: str) -> str:
        return f"{self.prefix}.{suffix}"


Linear = str | QuantLinear  # a dense [in, out] initializer name, or 4/8-bit blocks


class GraphBuilder:
    """Collects nodes, inputs, outputs and initializers; node names must be unique."""

    def __init__(self, name: str, dtype: str = "float32", accuracy_level: int = 0) -> None:
        self.name = name
        self.dtype = dtype  # activation dtype of the model graphs
        self.accuracy_level = accuracy_level  # MatMulNBits' compute precision (0 = exact)
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.initializers: dict[str, TensorProto] = {}
        self._node_names: set[str] = set()

    def input(self, name: str, dtype: str, shape: list[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, _onnx_type(dtype), shape))
        return name

    def output(self, source: str, name: str, dtype: str, shape: list[int | str]) -> None:
        """Expose tensor `source` as graph output `name` (through an Identity if renamed)."""
        if source != name:
            self.node("Identity", [source], name=f"/outputs/{name}", outputs=[name])
        self.outputs.append(helper.make_tensor_value_info(name, _onnx_type(dtype), shape))

    def node(self, op: str, inputs: list[str], name: str, outputs: list[str] | None = None,
             num_outputs: int = 1, domain: str = "", **attrs: object) -> str:
        """Emit one node named `name`; returns its first output (`{name}_output_0` unless
        `outputs` names them). Use `node_outputs` for the others of a multi-output node."""
        assert name not in self._node_names, f"duplicate node name {name}"
        self._node_names.add(name)
        outputs = outputs or [f"{name}_output_{i}" for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain or None,
                                           **attrs))
        return outputs[0]

    def node_outputs(self, name: str) -> list[str]:
        node = next(n for n in reversed(self.nodes) if n.name == name)
        return list(node.output)

    def weight(self, tensor: TensorProto) -> str:
        """Register an initializer (usually a WeightStore reference) once; returns its name."""
        self.initializers.setdefault(tensor.name, tensor)
        return tensor.name

    def const(self, values: object, dtype: str = "int64", name: str | None = None) -> str:
        """A small constant stored inside the graph, named by content unless `name` is given."""
        array = np.asarray(values, dtype=_numpy_dtype(dtype))
        if name is None:
            flat = "_".join(str(v) for v in array.reshape(-1).tolist())
            name = f"/const/{dtype}_{list(array.shape)}_{flat}".replace(" ", "")
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def make_model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  initializer=list(self.initializers.values()))
        opsets = [helper.make_opsetid("", OPSET)]
        if any(n.domain == CONTRIB for n in self.nodes):
            opsets.append(helper.make_opsetid(CONTRIB, 1))
        model = helper.make_model(graph, opset_imports=opsets, producer_name="cellspec")
        model.ir_version = 10
        return model


def make_linear(g: GraphBuilder, x: str, weight: Linear, name: str, bias: str | None = None,
                out: str | None = None, rank: int = 3) -> str:
    """x [..., in] (of rank `rank`) @ weight [in, out] (+ bias [out]) -> [..., out]."""
    outputs = [out] if out and bias is None else None
    if isinstance(weight, QuantLinear):
        y = make_matmul_nbits(g, x, weight, name, outputs, rank)
    else:
        y = g.node("MatMul", [x, weight], name=f"{name}/MatMul", outputs=outputs)
    if bias is None:
        return y
    return g.node("Add", [y, bias], name=f"{name}/Add", outputs=[out] if out else None)


def make_matmul_nbits(g: GraphBuilder, x: str, weight: QuantLinear, name: str,
                      outputs: list[str] | None = None, rank: int = 3) -> str:
    """x [..., K] @ the blocks [K, N]. Q4_1 blocks (W = d * q + m) keep their minimum m as
    `offsets` [num_blocks, N]: y = MatMulNBits(x) + (x summed per block of K) @ offsets, which
    is exact where a float zero point -m / d is not, and keeps ONNX Runtime's packed kernel."""
    w = weight.initializer
    inputs = [x, w("qweight"), w("scales")] + ([w("zero_points")] if weight.has_zero_points
                                                else [])
    y = g.node("MatMulNBits", inputs, name=f"{name}/MatMulNBits",
               outputs=None if weight.has_offsets else outputs, domain=CONTRIB,
               K=weight.in_features, N=weight.out_features, bits=weight.bits,
               block_size=weight.block_size, accuracy_level=g.accuracy_level)
    if not weight.has_offsets:
        return y
    blocks = weight.in_features // weight.block_size
    split = g.node("Reshape", [x, g.const([0] * (rank - 1) + [blocks, weight.block_size])],
                   name=f"{name}/blocks/Reshape")
    sums = g.node("ReduceSum", [split, g.const([-1])], name=f"{name}/blocks/ReduceSum",
                  keepdims=0)
    shift = g.node("MatMul", [sums, w("offsets")], name=f"{name}/offsets/MatMul")
    return g.node("Add", [y, shift], name=f"{name}/offsets/Add", outputs=outputs)


def make_split(g: GraphBuilder, x: str, sizes: list[int], name: str,
               outputs: list[str | None] | None = None) -> list[str]:
    """x [..., sum(sizes)] -> one [..., size] per size, as Slices of the last axis.

    Slices rather than one Split: a CUDA Split of uneven sizes copies its sizes from the host
    on every call. ONNX Runtime merges the Slices into a Split on the CPU."""
    outputs = outputs or [None] * len(sizes)
    edges = np.cumsum([0, *sizes]).tolist()
    return [g.node("Slice", [x, g.const([start]), g.const([end]), g.const([-1])],
                   name=f"{name}/Slice_{k}", outputs=[out] if out else None)
            for k, (start, end, out) in enumerate(zip(edges[:-1], edges[1:], outputs))]


def make_rms_norm(g: GraphBuilder, x: str, weight: str, eps: float, name: str) -> str:
    """weight * x / sqrt(mean(x^2, last axis) + eps), the statistics in float32."""
    return g.node("RMSNormalization", [x, weight], name=f"{name}/RMSNormalization",
                  epsilon=eps, axis=-1, stash_type=1)


def make_skip_rms_norm(g: GraphBuilder, x: str, residual: str | None, weight: str, eps: float,
                       name: str) -> tuple[str, str]:
    """(rms_norm(residual + x), residual + x): the residual add folded into the norm. With no
    residual yet (the first layer), x itself is the residual."""
    if residual is None:
        return make_rms_norm(g, x, weight, eps, name), x
    g.node("SkipSimplifiedLayerNormalization", [x, residual, weight],
           name=f"{name}/SkipSimplifiedLayerNormalization", domain=CONTRIB, epsilon=eps,
           outputs=[f"{name}/normed", "", "", f"{name}/sum"])
    return f"{name}/normed", f"{name}/sum"


def make_head_norm(g: GraphBuilder, x: str, weight: str, heads: int, head_dim: int, eps: float,
                   name: str) -> str:
    """Qwen3's q/k norm: RMS over each head's D values of x [S, Q, heads * D]."""
    split = g.node("Reshape", [x, g.const([0, 0, heads, head_dim])], name=f"{name}/Reshape")
    normed = make_rms_norm(g, split, weight, eps, name)
    return g.node("Reshape", [normed, g.const([0, 0, heads * head_dim])],
                  name=f"{name}/ReshapeBack")


def make_rope_caches(g: GraphBuilder, inv_freq: np.ndarray, num_positions: int,
                     name: str = "/rope") -> tuple[str, str]:
    """cos, sin [num_positions, D / 2] in the activation dtype: angle = pos * inv_freq, the
    product in float32 as transformers computes it."""
    angles = np.arange(num_positions, dtype=np.float32)[:, None] * inv_freq.astype(np.float32)
    cos = np.cos(angles.astype(np.float64)).astype(np.float32)
    sin = np.sin(angles.astype(np.float64)).astype(np.float32)
    return (g.const(cos, g.dtype, name=f"{name}/cos_cache"),
            g.const(sin, g.dtype, name=f"{name}/sin_cache"))


def make_rope(g: GraphBuilder, x: str, positions: str, caches: tuple[str, str], heads: int,
              name: str, out: str | None = None) -> str:
    """x [S, Q, heads * D] rotated at positions [S, Q]: x * cos + rotate_half(x) * sin, the
    half-split layout of transformers (not interleaved)."""
    return g.node("RotaryEmbedding", [x, caches[0], caches[1], positions],
                  name=f"{name}/RotaryEmbedding", outputs=[out] if out else None,
                  num_heads=heads, interleaved=0)


def make_cell_kv(g: GraphBuilder, pool: str, cell_table: str, new: str, name: str) -> str:
    """[pool[cell_table] ; new] per row: [S, N, KV * D] read cells then the row's own
    [S, Q, KV * D] -> [S, N + Q, KV * D]."""
    read = g.node("Gather", [pool, cell_table], name=f"{name}/Gather", axis=0)
    return g.node("Concat", [read, new], name=f"{name}/Concat", axis=1)


def make_attention(g: GraphBuilder, q: str, k: str, v: str, mask: str, heads: int,
                   kv_heads: int, head_dim: int, name: str) -> str:
    """q [S, Q, H * D], k/v [S, N + Q, KV * D], mask [S, 1, Q, N + Q] bool -> [S, Q, H * D].
    Query head h reads kv head h // (H / KV), as transformers' repeat_kv; softmax in float32."""
    return g.node("Attention", [q, k, v, mask], name=f"{name}/Attention", q_num_heads=heads,
                  kv_num_heads=kv_heads, scale=float(head_dim) ** -0.5,
                  softmax_precision=TensorProto.FLOAT)


def make_mlp(g: GraphBuilder, x: str, gate_up: Linear, down: Linear, inter: int, name: str,
             biases: tuple[str, str] | None = None) -> str:
    """SwiGLU: down(silu(gate(x)) * up(x)) with gate and up in one projection [in, 2 * inter];
    silu(a) = a * sigmoid(a), which ONNX Runtime fuses into one QuickGelu."""
    b_gate_up, b_down = biases or (None, None)
    both = make_linear(g, x, gate_up, f"{name}/gate_up_proj", b_gate_up)
    gate, up = make_split(g, both, [inter, inter], f"{name}/gate_up_proj")
    sig = g.node("Sigmoid", [gate], name=f"{name}/act/Sigmoid")
    act = g.node("Mul", [gate, sig], name=f"{name}/act/Mul")
    hidden = g.node("Mul", [act, up], name=f"{name}/Mul")
    return make_linear(g, hidden, down, f"{name}/down_proj", b_down)


def make_embedding(g: GraphBuilder, table: Linear, tokens: str, name: str = "/embed_tokens"
                   ) -> str:
    """table [V, H] rows of tokens [S, Q] -> [S, Q, H]; 8-bit blocks through
    GatherBlockQuantized (which yields [S, Q, H / block, block])."""
    if not isinstance(table, QuantLinear):
        return g.node("Gather", [table, tokens], name=f"{name}/Gather", axis=0)
    w = table.initializer
    rows = g.node("GatherBlockQuantized", [w("qweight"), tokens, w("gather_scales"),
                                           w("gather_zero_points")],
                  name=f"{name}/GatherBlockQuantized", domain=CONTRIB, bits=table.bits,
                  block_size=table.block_size, gather_axis=0, quantize_axis=2)
    return g.node("Reshape", [rows, g.const([0, 0, table.in_features])], name=f"{name}/Reshape")


def make_lm_head(g: GraphBuilder, x: str, head: Linear, name: str = "/lm_head") -> str:
    """x [R, H] -> float32 logits [R, V]. A dense head is [V, H] (possibly the embedding
    table, shared), multiplied transposed."""
    if isinstance(head, QuantLinear):
        logits = make_linear(g, x, head, name, rank=2)
    else:
        logits = g.node("Gemm", [x, head], name=f"{name}/Gemm", transB=1)
    if g.dtype == "float32":
        return logits
    return g.node("Cast", [logits], name=f"{name}/CastF32", to=TensorProto.FLOAT)


def _onnx_type(dtype: str) -> int:
    return TensorProto.BOOL if dtype == "bool" else ONNX_DTYPES[dtype]


def _numpy_dtype(dtype: str) -> np.dtype:
    from cellspec.export.weights import numpy_dtype

    return np.dtype(bool) if dtype == "bool" else numpy_dtype(dtype)
