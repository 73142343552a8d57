"""A small ONNX graph builder and the reusable `make_*` primitives the graphs are made of.

Every primitive takes the builder, tensor names and a node-name prefix such as `/layers.3/attn`,
emits standard ai.onnx opset-21 nodes (no contrib ops, so TensorRT parses them) and returns the
name of its output. Activations are in `builder.dtype`; norms, rope tables and softmax are
computed in float32 and cast back, as transformers does.

Shapes: T = tokens in the step, S = keys visible to the step (N read cells + T), H = query heads,
KV = key/value heads, G = H / KV, D = head_dim.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cellspec.export.weights import ONNX_DTYPES

OPSET = 21
Dim = int | str


class GraphBuilder:
    """Collects nodes, inputs, outputs and initializers; node names must be unique."""

    def __init__(self, name: str, dtype: str = "float32") -> None:
        self.name = name
        self.dtype = dtype  # activation dtype of the model graphs
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.initializers: dict[str, TensorProto] = {}
        self.memo: dict[tuple[object, ...], str] = {}  # shared sub-results, e.g. tiled biases
        self._node_names: set[str] = set()

    def input(self, name: str, dtype: str, shape: list[Dim]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, ONNX_DTYPES[dtype], shape))
        return name

    def output(self, source: str, name: str, dtype: str, shape: list[Dim]) -> None:
        """Expose tensor `source` as graph output `name` (through an Identity if renamed)."""
        if source != name:
            self.node("Identity", [source], name=f"/outputs/{name}", outputs=[name])
        self.outputs.append(helper.make_tensor_value_info(name, ONNX_DTYPES[dtype], shape))

    def node(self, op: str, inputs: list[str], name: str, outputs: list[str] | None = None,
             num_outputs: int = 1, **attrs: object) -> str:
        """Emit one node named `name`; returns its first output (`{name}_output_0` unless
        `outputs` names them). Use `node_outputs` for the others of a multi-output node.
        `num_outputs` is also passed as the attribute to ops that have one (Split)."""
        assert name not in self._node_names, f"duplicate node name {name}"
        self._node_names.add(name)
        if num_outputs > 1 and "num_outputs" in onnx.defs.get_schema(op, OPSET).attributes:
            attrs["num_outputs"] = num_outputs
        outputs = outputs or [f"{name}_output_{i}" for i in range(num_outputs)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, **attrs))
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
        array = np.asarray(values, dtype=np.dtype(dtype))
        if name is None:
            flat = "_".join(str(v) for v in array.reshape(-1).tolist())
            name = f"/const/{dtype}_{list(array.shape)}_{flat}".replace(" ", "")
        if name not in self.initializers:
            self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def cast(self, x: str, dtype: str, name: str) -> str:
        """x cast to `dtype` (a cellspec dtype name)."""
        return self.node("Cast", [x], name=name, to=ONNX_DTYPES[dtype])

    def to_float(self, x: str, name: str) -> str:
        """x (activation dtype) as float32."""
        return x if self.dtype == "float32" else self.cast(x, "float32", f"{name}/CastF32")

    def from_float(self, x: str, name: str) -> str:
        """x (float32) in the activation dtype."""
        return x if self.dtype == "float32" else self.cast(x, self.dtype, f"{name}/CastBack")

    def make_model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs,
                                  initializer=list(self.initializers.values()))
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="cellspec")
        model.ir_version = 10
        return model


def make_linear(g: GraphBuilder, x: str, weight: str, name: str, bias: str | None = None) -> str:
    """x [..., in] @ weight [in, out] (+ bias [out]) -> [..., out]."""
    y = g.node("MatMul", [x, weight], name=f"{name}/MatMul")
    return y if bias is None else g.node("Add", [y, bias], name=f"{name}/Add")


def make_rms_norm(g: GraphBuilder, x: str, weight: str, eps: float, name: str) -> str:
    """weight * x / sqrt(mean(x^2, last axis) + eps), the statistics in float32."""
    xf = g.to_float(x, name)
    square = g.node("Pow", [xf, g.const(2.0, "float32")], name=f"{name}/Pow")
    mean = g.node("ReduceMean", [square, g.const([-1])], name=f"{name}/ReduceMean", keepdims=1)
    shifted = g.node("Add", [mean, g.const(eps, "float32")], name=f"{name}/Add")
    root = g.node("Sqrt", [shifted], name=f"{name}/Sqrt")
    normed = g.from_float(g.node("Div", [xf, root], name=f"{name}/Div"), name)
    return g.node("Mul", [normed, weight], name=f"{name}/Mul")


def make_rope_tables(g: GraphBuilder, positions: str, inv_freq: np.ndarray,
                     name: str = "/rope") -> tuple[str, str]:
    """positions int64 [T] -> (cos, sin) [T, 1, D] in the activation dtype.

    freqs = pos * inv_freq in float32, duplicated as [freqs ; freqs] (HF rotate_half layout)."""
    inv = g.const(inv_freq.astype(np.float32), "float32", name=f"{name}/inv_freq")
    pos = g.node("Cast", [positions], name=f"{name}/CastPos", to=TensorProto.FLOAT)
    pos = g.node("Unsqueeze", [pos, g.const([1])], name=f"{name}/Unsqueeze")
    freqs = g.node("Mul", [pos, inv], name=f"{name}/Mul")  # [T, D/2]
    emb = g.node("Concat", [freqs, freqs], name=f"{name}/Concat", axis=-1)
    emb = g.node("Unsqueeze", [emb, g.const([1])], name=f"{name}/UnsqueezeHeads")
    cos = g.from_float(g.node("Cos", [emb], name=f"{name}/Cos"), f"{name}/cos")
    sin = g.from_float(g.node("Sin", [emb], name=f"{name}/Sin"), f"{name}/sin")
    return cos, sin


def make_rope(g: GraphBuilder, x: str, cos: str, sin: str, name: str) -> str:
    """x [T, heads, D] -> x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2 ; x1]."""
    g.node("Split", [x], name=f"{name}/Split", num_outputs=2, axis=-1)
    x1, x2 = g.node_outputs(f"{name}/Split")
    neg = g.node("Neg", [x2], name=f"{name}/Neg")
    rotated = g.node("Concat", [neg, x1], name=f"{name}/Concat", axis=-1)
    a = g.node("Mul", [x, cos], name=f"{name}/MulCos")
    b = g.node("Mul", [rotated, sin], name=f"{name}/MulSin")
    return g.node("Add", [a, b], name=f"{name}/Add")


def make_kv_concat(g: GraphBuilder, pool: str, cells_read: str, new: str, name: str) -> str:
    """[pool[cells_read] ; new]: [N, KV, D] read cells then the step's [T, KV, D] -> [S, KV, D]."""
    read = g.node("Gather", [pool, cells_read], name=f"{name}/Gather", axis=0)
    return g.node("Concat", [read, new], name=f"{name}/Concat", axis=0)


def make_attention(g: GraphBuilder, q: str, k: str, v: str, bias: str, num_kv_heads: int,
                   head_dim: int, group: int, name: str) -> str:
    """GQA without repeating keys: q [T, H, D], k/v [S, KV, D], bias float32 [T, S] (0 or -inf)
    -> [T, H * D]. Query head h = kv * G + g reads kv head kv, as HF `repeat_kv`."""
    kv, d = num_kv_heads, head_dim
    q = g.node("Reshape", [q, g.const([-1, kv, group, d])], name=f"{name}/q/Reshape")
    q = g.node("Transpose", [q], name=f"{name}/q/Transpose", perm=[1, 2, 0, 3])  # [KV, G, T, D]
    q = g.node("Reshape", [q, g.const([kv, -1, d])], name=f"{name}/q/ReshapeRows")  # [KV, G*T, D]
    kt = g.node("Transpose", [k], name=f"{name}/k/Transpose", perm=[1, 2, 0])  # [KV, D, S]
    vt = g.node("Transpose", [v], name=f"{name}/v/Transpose", perm=[1, 0, 2])  # [KV, S, D]
    scores = g.to_float(g.node("MatMul", [q, kt], name=f"{name}/scores/MatMul"), f"{name}/scores")
    scores = g.node("Mul", [scores, g.const(d ** -0.5, "float32")], name=f"{name}/scores/Mul")
    scores = g.node("Add", [scores, _group_bias(g, bias, group)], name=f"{name}/scores/Add")
    probs = g.node("Softmax", [scores], name=f"{name}/Softmax", axis=-1)  # [KV, G*T, S]
    probs = g.from_float(probs, f"{name}/probs")
    out = g.node("MatMul", [probs, vt], name=f"{name}/out/MatMul")  # [KV, G*T, D]
    out = g.node("Reshape", [out, g.const([kv, group, -1, d])], name=f"{name}/out/Reshape")
    out = g.node("Transpose", [out], name=f"{name}/out/Transpose", perm=[2, 0, 1, 3])
    return g.node("Reshape", [out, g.const([0, kv * group * d])], name=f"{name}/out/ReshapeT")


def _group_bias(g: GraphBuilder, bias: str, group: int) -> str:
    """bias [T, S] tiled to [G * T, S]: score row g * T + t takes bias row t. Built once."""
    if group == 1:
        return bias
    key = ("group_bias", bias, group)
    if key not in g.memo:
        g.memo[key] = g.node("Tile", [bias, g.const([group, 1])], name=f"/{bias}/Tile{group}")
    return g.memo[key]


def make_mlp(g: GraphBuilder, x: str, gate: str, up: str, down: str, name: str,
             biases: tuple[str, str, str] | None = None) -> str:
    """SwiGLU: down(silu(gate(x)) * up(x)), weights [in, out]; silu(a) = a * sigmoid(a)."""
    b_gate, b_up, b_down = biases or (None, None, None)
    a = make_linear(g, x, gate, f"{name}/gate_proj", b_gate)
    sig = g.node("Sigmoid", [a], name=f"{name}/act/Sigmoid")
    act = g.node("Mul", [a, sig], name=f"{name}/act/Mul")
    gated = make_linear(g, x, up, f"{name}/up_proj", b_up)
    hidden = g.node("Mul", [act, gated], name=f"{name}/Mul")
    return make_linear(g, hidden, down, f"{name}/down_proj", b_down)


def make_embedding(g: GraphBuilder, table: str, tokens: str, name: str = "/embed_tokens") -> str:
    """table [V, H] rows of tokens [...] -> [..., H]."""
    return g.node("Gather", [table, tokens], name=f"{name}/Gather", axis=0)


def make_lm_head(g: GraphBuilder, x: str, weight: str, name: str = "/lm_head") -> str:
    """x [R, H] @ weight[V, H]^T -> float32 logits [R, V]; weight may be the embedding table."""
    logits = g.node("Gemm", [x, weight], name=f"{name}/Gemm", transB=1)
    return g.to_float(logits, name)
