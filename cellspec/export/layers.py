"""What the target and draft graphs share: checkpoint weights as graph initializers (fused,
transposed, cast or 4-bit), and the decoder layer over the per-sequence step of graph ABI v2.

A layer reads its rows' cells through `cell_table` ([S, N]) and attends over [those cells ;
the row's own Q tokens] under `attn_mask`, so every token sees only its own sequence. Per layer
(Llama, after ONNX Runtime's fusions): the input norm with the residual folded in, one QKV
projection, its three slices, two rotary ops, two gathers and two concats of cells, one
attention op, the output projection, the post-attention norm with the residual, one gate/up
projection, its two slices, SiLU (one QuickGelu), the gating product and the down projection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from cellspec.errors import InvalidCheckpoint
from cellspec.export.graph import (
    GraphBuilder,
    Linear,
    QuantLinear,
    make_attention,
    make_cell_kv,
    make_head_norm,
    make_linear,
    make_mlp,
    make_rope,
    make_skip_rms_norm,
    make_split,
)
from cellspec.export.quant import BlockQuantized, quantize_rtn
from cellspec.export.quant_graph import gather_initializers, initializers, quant_linear
from cellspec.export.weights import WeightStore, numpy_dtype


class Weights:
    """Checkpoint tensors by name -> initializers in the graph's dtype, stored once in the
    artifact's WeightStore under `store_prefix + name`. Projections are HF Linear weights
    [out, in]; `linear` fuses several along `out` and stores them transposed, [in, sum(out)],
    or, with `bits`, as MatMulNBits blocks: the checkpoint's own (a GGUF's, `blocks(name)`)
    or round-to-nearest ones."""

    def __init__(self, tensors: Mapping[str, np.ndarray], store: WeightStore, g: GraphBuilder,
                 store_prefix: str = "", bits: int = 0) -> None:
        self.tensors, self.store, self.g = tensors, store, g
        self.store_prefix = store_prefix
        self.dtype = numpy_dtype(g.dtype)
        self.bits = bits  # 0: dense projections

    def fetch(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.tensors:
            raise InvalidCheckpoint(f"tensor {name} is missing from the checkpoint")
        array = np.asarray(self.tensors[name])
        if array.shape != shape:
            raise InvalidCheckpoint(f"tensor {name}: shape {array.shape}, expected {shape}")
        return array

    def has(self, name: str) -> bool:
        return name in self.tensors

    def plain(self, name: str, shape: tuple[int, ...]) -> str:
        return self._stored(self.store_prefix + name, lambda: self.fetch(name, shape))

    def linear(self, names: list[str], out_sizes: list[int], in_features: int,
               key: str) -> Linear:
        """The projections `names` ([out_j, in] each) as one [in, sum(out_j)] weight `key.T`."""
        if self.bits:
            return self.quantized(names, out_sizes, in_features, key, self.bits)

        def load() -> np.ndarray:
            parts = [self.fetch(n, (o, in_features)) for n, o in zip(names, out_sizes)]
            return np.concatenate(parts, axis=0).T

        return self._stored(f"{self.store_prefix}{key}.T", load)

    def quantized(self, names: list[str], out_sizes: list[int], in_features: int, key: str,
                  bits: int) -> QuantLinear:
        """The projections `names` as one block-quantized [N, K] matrix stored under `key`:
        the checkpoint's own blocks where it has them, else `bits`-bit round-to-nearest."""
        prefix = f"{self.store_prefix}{key}"
        if f"{prefix}.qweight" not in self.store:
            parts = [self._blocks(n, o, in_features, bits) for n, o in zip(names, out_sizes)]
            q = BlockQuantized.concat(parts) if len(parts) > 1 else parts[0]
            arrays = initializers(q, prefix, self.dtype)
            if q.bits == 8 and q.offsets is None and in_features % q.block_size == 0:
                arrays |= gather_initializers(q, prefix, self.dtype)  # an embedding table
            for name, array in arrays.items():
                self.store.add(name, array)
            self.store.meta[prefix] = quant_linear(q, prefix)
        return borrow(self.g, self.store, self.store.meta[prefix])

    def _blocks(self, name: str, out: int, in_features: int, bits: int) -> BlockQuantized:
        own = self.tensors.blocks(name) if hasattr(self.tensors, "blocks") else None
        if own is None:
            return quantize_rtn(self.fetch(name, (out, in_features)), bits)
        if own.shape != (out, in_features):
            raise InvalidCheckpoint(f"tensor {name}: shape {own.shape}, expected "
                                    f"{(out, in_features)}")
        return own

    def bias(self, names: list[str], sizes: list[int], key: str) -> str:
        def load() -> np.ndarray:
            return np.concatenate([self.fetch(n, (s,)) for n, s in zip(names, sizes)])

        return self._stored(f"{self.store_prefix}{key}", load)

    def _stored(self, key: str, load) -> str:
        if key not in self.store:
            array = load()
            if array.dtype != self.dtype:
                array = array.astype(np.float32).astype(self.dtype)
            self.store.add(key, array)
        return self.g.weight(self.store.get(key))


def borrow(g: GraphBuilder, store: WeightStore, weight: Linear) -> Linear:
    """Register in `g` the initializers of a weight some graph stored already."""
    if isinstance(weight, QuantLinear):
        for name in store.names_with_prefix(weight.prefix + "."):
            g.weight(store.get(name))
    else:
        g.weight(store.get(weight))
    return weight


@dataclass(frozen=True)
class LayerSpec:
    """The dimensions of one decoder layer (target or draft)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    eps: float
    has_qk_norm: bool
    has_attention_bias: bool = False
    has_mlp_bias: bool = False


@dataclass(frozen=True)
class StepTensors:
    """The graph inputs every layer reads: positions [S, Q], cell_table [S, N], the masks
    [S, 1, Q, N + Q] and the rotary caches (cos, sin)."""

    positions: str
    cell_table: str
    mask: str
    mask_window: str | None
    rope: tuple[str, str]


def make_layer_weights(w: Weights, spec: LayerSpec, prefix: str) -> dict[str, object]:
    """Register one layer's weights; `prefix` is its tensors' name prefix (e.g.
    `model.layers.3.`). Keys: input_norm, post_norm, qkv, qkv_bias, q_norm, k_norm, o_proj,
    o_bias, gate_up, gate_up_bias, down, down_bias."""
    h, d, kv_rows, q_rows = spec.hidden, spec.head_dim, spec.kv_heads * spec.head_dim, \
        spec.heads * spec.head_dim
    attn, mlp = f"{prefix}self_attn.", f"{prefix}mlp."
    qkv = [f"{attn}{p}_proj.weight" for p in "qkv"]
    gate_up = [f"{mlp}gate_proj.weight", f"{mlp}up_proj.weight"]
    sizes = [q_rows, kv_rows, kv_rows]
    weights: dict[str, object] = {
        "input_norm": w.plain(f"{prefix}input_layernorm.weight", (h,)),
        "post_norm": w.plain(f"{prefix}post_attention_layernorm.weight", (h,)),
        "qkv": w.linear(qkv, sizes, h, f"{attn}qkv_proj.weight"),
        "o_proj": w.linear([f"{attn}o_proj.weight"], [h], q_rows, f"{attn}o_proj.weight"),
        "gate_up": w.linear(gate_up, [spec.inter] * 2, h, f"{mlp}gate_up_proj.weight"),
        "down": w.linear([f"{mlp}down_proj.weight"], [h], spec.inter, f"{mlp}down_proj.weight"),
        "qkv_bias": None, "o_bias": None, "gate_up_bias": None, "down_bias": None,
        "q_norm": None, "k_norm": None,
    }
    if spec.has_qk_norm:
        weights["q_norm"] = w.plain(f"{attn}q_norm.weight", (d,))
        weights["k_norm"] = w.plain(f"{attn}k_norm.weight", (d,))
    if spec.has_attention_bias:
        weights["qkv_bias"] = w.bias([n.replace(".weight", ".bias") for n in qkv], sizes,
                                     f"{attn}qkv_proj.bias")
        weights["o_bias"] = w.bias([f"{attn}o_proj.bias"], [h], f"{attn}o_proj.bias")
    if spec.has_mlp_bias:
        weights["gate_up_bias"] = w.bias([n.replace(".weight", ".bias") for n in gate_up],
                                         [spec.inter] * 2, f"{mlp}gate_up_proj.bias")
        weights["down_bias"] = w.bias([f"{mlp}down_proj.bias"], [h], f"{mlp}down_proj.bias")
    return weights


def make_layer(g: GraphBuilder, spec: LayerSpec, weights: dict, step: StepTensors, x: str,
               residual: str | None, pools: tuple[str, str], name: str, *,
               is_windowed: bool = False, kv_outputs: tuple[str, str] | None = None,
               ) -> tuple[str, str, str]:
    """One decoder layer. x: what the previous layer added to the residual stream (the
    embeddings for the first layer, residual None). Returns (this layer's MLP output, the
    residual stream after its attention, the stream it started from: the previous layer's
    output); the next norm adds the first two. kv_outputs names the rotated keys and values
    [S, Q, KV * D] as graph outputs."""
    normed, start = make_skip_rms_norm(g, x, residual, weights["input_norm"], spec.eps,
                                       f"{name}/input_layernorm")
    attn = _make_attention_block(g, spec, weights, step, normed, pools, name, is_windowed,
                                 kv_outputs)
    normed, residual = make_skip_rms_norm(g, attn, start, weights["post_norm"], spec.eps,
                                          f"{name}/post_attention_layernorm")
    mlp = make_mlp(g, normed, weights["gate_up"], weights["down"], spec.inter, f"{name}/mlp",
                   (weights["gate_up_bias"], weights["down_bias"]))
    return mlp, residual, start


def _make_attention_block(g: GraphBuilder, spec: LayerSpec, weights: dict, step: StepTensors,
                          x: str, pools: tuple[str, str], name: str, is_windowed: bool,
                          kv_outputs: tuple[str, str] | None) -> str:
    d, kv_rows = spec.head_dim, spec.kv_heads * spec.head_dim
    qkv = make_linear(g, x, weights["qkv"], f"{name}/attn/qkv_proj", weights["qkv_bias"])
    k_out, v_out = kv_outputs or (None, None)
    q, k, v = make_split(g, qkv, [spec.heads * d, kv_rows, kv_rows], f"{name}/attn/qkv_proj",
                         [None, None, v_out])
    if weights["q_norm"] is not None:
        q = make_head_norm(g, q, weights["q_norm"], spec.heads, d, spec.eps,
                           f"{name}/attn/q_norm")
        k = make_head_norm(g, k, weights["k_norm"], spec.kv_heads, d, spec.eps,
                           f"{name}/attn/k_norm")
    q = make_rope(g, q, step.positions, step.rope, spec.heads, f"{name}/attn/q_rope")
    k = make_rope(g, k, step.positions, step.rope, spec.kv_heads, f"{name}/attn/k_rope",
                  out=k_out)
    keys = make_cell_kv(g, pools[0], step.cell_table, k, f"{name}/attn/keys")
    values = make_cell_kv(g, pools[1], step.cell_table, v, f"{name}/attn/values")
    mask = step.mask_window if is_windowed else step.mask
    out = make_attention(g, q, keys, values, mask, spec.heads, spec.kv_heads, d,
                         f"{name}/attn")
    return make_linear(g, out, weights["o_proj"], f"{name}/attn/o_proj", weights["o_bias"])
