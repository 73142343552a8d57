"""The target graph of DESIGN.md's Method ABI, emitted from checkpoint weights.

in:  tokens [1, T], positions [T], logits_rows [R], cells_read [N], attn_bias [T, S] float32
     (S = N + T; columns are [read cells ; this step's tokens]), attn_bias_window [T, S] (only
     when some layer has a sliding window; those layers use it), k_pool.{i} / v_pool.{i}
     [max_cells, KV, D] in the model dtype, read only.
out: logits [R, V] float32 (final norm + LM head on the rows `logits_rows` only),
     k_new.{i} / v_new.{i} [T, KV, D] (keys after q/k norm and rope), and with taps
     taps [1, T, n_taps * hidden]: the outputs of the tapped decoder layers, in the given order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from tqdm import tqdm

from cellspec import artifact as names
from cellspec.errors import InvalidCheckpoint
from cellspec.export.arch import Hparams, rope_inv_freq
from cellspec.export.graph import (
    GraphBuilder,
    make_attention,
    make_embedding,
    make_kv_concat,
    make_linear,
    make_lm_head,
    make_mlp,
    make_rms_norm,
    make_rope,
    make_rope_tables,
)
from cellspec.export.weights import WeightStore, numpy_dtype

EMBED_WEIGHT = "model.embed_tokens.weight"
LM_HEAD_WEIGHT = "lm_head.weight"
NORM_WEIGHT = "model.norm.weight"


def lm_head_weight(hp: Hparams) -> str:
    """The initializer name of the LM head [V, H]: the embedding table when tied."""
    return EMBED_WEIGHT if hp.tie_word_embeddings else LM_HEAD_WEIGHT


class _Weights:
    """Fetches checkpoint tensors by HF name, checks their shape, stores them in the model dtype
    (projections transposed to [in, out]) and registers them in the graph."""

    def __init__(self, tensors: Mapping[str, np.ndarray], store: WeightStore, g: GraphBuilder,
                 dtype: str) -> None:
        self.tensors, self.store, self.g = tensors, store, g
        self.dtype = numpy_dtype(dtype)

    def fetch(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in self.tensors:
            raise InvalidCheckpoint(f"tensor {name} is missing from the checkpoint")
        array = np.asarray(self.tensors[name])
        if array.shape != shape:
            raise InvalidCheckpoint(f"tensor {name}: shape {array.shape}, expected {shape}")
        return array

    def plain(self, name: str, shape: tuple[int, ...]) -> str:
        if name in self.store:
            return self.g.weight(self.store.get(name))
        return self.g.weight(self.store.add(name, self._cast(self.fetch(name, shape))))

    def transposed(self, name: str, out_features: int, in_features: int) -> str:
        """HF Linear weight [out, in] stored as `{name}.T` [in, out] for MatMul."""
        array = self.fetch(name, (out_features, in_features)).T
        return self.g.weight(self.store.add(f"{name}.T", self._cast(array)))

    def _cast(self, array: np.ndarray) -> np.ndarray:
        if array.dtype == self.dtype:
            return array
        return array.astype(np.float32).astype(self.dtype)


def make_target_graph(hp: Hparams, tensors: Mapping[str, np.ndarray], store: WeightStore,
                      dtype: str, max_cells: int, taps: tuple[int, ...] = (),
                      progress: bool = False) -> onnx.ModelProto:
    """The target forward graph; weights go to `store`, the graph references them."""
    g = GraphBuilder("target", dtype)
    w = _Weights(tensors, store, g, dtype)
    x = _make_inputs(g, hp, max_cells)
    x = make_embedding(g, w.plain(EMBED_WEIGHT, (hp.vocab_size, hp.hidden_size)), x)
    cos, sin = make_rope_tables(g, names.POSITIONS, rope_inv_freq(hp))
    layer_outputs = []
    for i in tqdm(range(hp.num_layers), desc="export target", unit="layer", disable=not progress):
        x = _make_layer(g, w, hp, i, x, cos, sin)
        layer_outputs.append(x)
    _make_logits(g, w, hp, x)
    if taps:
        _make_taps(g, [layer_outputs[i] for i in taps], dtype, len(taps) * hp.hidden_size)
    return g.make_model()


def _make_inputs(g: GraphBuilder, hp: Hparams, max_cells: int) -> str:
    """Declare the inputs; returns the tokens as [T]."""
    g.input(names.TOKENS, "int64", [1, "T"])
    g.input(names.POSITIONS, "int64", ["T"])
    g.input(names.LOGITS_ROWS, "int64", ["R"])
    g.input(names.CELLS_READ, "int64", ["N"])
    g.input(names.ATTN_BIAS, "float32", ["T", "S"])  # S = N + T
    if any(hp.windows):
        g.input(names.ATTN_BIAS_WINDOW, "float32", ["T", "S"])
    pool = [max_cells, hp.num_kv_heads, hp.head_dim]
    for i in range(hp.num_layers):
        g.input(names.k_pool(i), g.dtype, pool)
        g.input(names.v_pool(i), g.dtype, pool)
    return g.node("Squeeze", [names.TOKENS, g.const([0])], name="/tokens/Squeeze")


def _make_layer(g: GraphBuilder, w: _Weights, hp: Hparams, i: int, x: str, cos: str,
                sin: str) -> str:
    """One decoder layer on the residual stream x [T, hidden]."""
    p, h = f"model.layers.{i}.", hp.hidden_size
    normed = make_rms_norm(g, x, w.plain(f"{p}input_layernorm.weight", (h,)), hp.rms_eps,
                           f"/layers.{i}/input_layernorm")
    x = g.node("Add", [x, _make_attention_block(g, w, hp, i, normed, cos, sin)],
               name=f"/layers.{i}/attn/residual/Add")
    normed = make_rms_norm(g, x, w.plain(f"{p}post_attention_layernorm.weight", (h,)),
                           hp.rms_eps, f"/layers.{i}/post_attention_layernorm")
    return g.node("Add", [x, _make_mlp_block(g, w, hp, i, normed)],
                  name=f"/layers.{i}/mlp/residual/Add")


def _make_attention_block(g: GraphBuilder, w: _Weights, hp: Hparams, i: int, x: str, cos: str,
                          sin: str) -> str:
    """Projections, q/k norm, rope, the step's k/v outputs, attention over [pool ; new]."""
    d, kv = hp.head_dim, hp.num_kv_heads
    q = _make_heads(g, w, hp, i, x, "q", hp.num_heads)
    k = _make_heads(g, w, hp, i, x, "k", kv)
    v = _make_heads(g, w, hp, i, x, "v", kv)
    q = make_rope(g, q, cos, sin, f"/layers.{i}/attn/q_rope")
    k = make_rope(g, k, cos, sin, f"/layers.{i}/attn/k_rope")
    g.output(k, names.k_new(i), g.dtype, ["T", kv, d])
    g.output(v, names.v_new(i), g.dtype, ["T", kv, d])
    keys = make_kv_concat(g, names.k_pool(i), names.CELLS_READ, k, f"/layers.{i}/attn/keys")
    values = make_kv_concat(g, names.v_pool(i), names.CELLS_READ, v, f"/layers.{i}/attn/values")
    bias = names.ATTN_BIAS_WINDOW if hp.windows[i] else names.ATTN_BIAS
    out = make_attention(g, q, keys, values, bias, kv, d, hp.num_heads // kv,
                         f"/layers.{i}/attn")
    p = f"model.layers.{i}.self_attn.o_proj"
    weight = w.transposed(f"{p}.weight", hp.hidden_size, hp.num_heads * d)
    bias_o = w.plain(f"{p}.bias", (hp.hidden_size,)) if hp.attention_bias else None
    return make_linear(g, out, weight, f"/layers.{i}/attn/o_proj", bias_o)


def _make_heads(g: GraphBuilder, w: _Weights, hp: Hparams, i: int, x: str, which: str,
                heads: int) -> str:
    """x [T, hidden] -> {which}_proj (+ {which}_norm for Qwen3) -> [T, heads, D]."""
    p, name, d = f"model.layers.{i}.self_attn.", f"/layers.{i}/attn/{which}_proj", hp.head_dim
    weight = w.transposed(f"{p}{which}_proj.weight", heads * d, hp.hidden_size)
    bias = w.plain(f"{p}{which}_proj.bias", (heads * d,)) if hp.attention_bias else None
    y = make_linear(g, x, weight, name, bias)
    y = g.node("Reshape", [y, g.const([-1, heads, d])], name=f"{name}/ReshapeHeads")
    if which == "v" or not hp.spec.has_qk_norm:
        return y
    norm = w.plain(f"{p}{which}_norm.weight", (d,))
    return make_rms_norm(g, y, norm, hp.rms_eps, f"/layers.{i}/attn/{which}_norm")


def _make_mlp_block(g: GraphBuilder, w: _Weights, hp: Hparams, i: int, x: str) -> str:
    p, h, inter = f"model.layers.{i}.mlp.", hp.hidden_size, hp.intermediate_size
    gate = w.transposed(f"{p}gate_proj.weight", inter, h)
    up = w.transposed(f"{p}up_proj.weight", inter, h)
    down = w.transposed(f"{p}down_proj.weight", h, inter)
    biases = None
    if hp.mlp_bias:
        biases = (w.plain(f"{p}gate_proj.bias", (inter,)), w.plain(f"{p}up_proj.bias", (inter,)),
                  w.plain(f"{p}down_proj.bias", (h,)))
    return make_mlp(g, x, gate, up, down, f"/layers.{i}/mlp", biases)


def _make_logits(g: GraphBuilder, w: _Weights, hp: Hparams, x: str) -> None:
    """Final norm and LM head on the kept rows only: x [T, H] -> logits [R, V] float32."""
    rows = g.node("Gather", [x, names.LOGITS_ROWS], name="/logits_rows/Gather", axis=0)
    rows = make_rms_norm(g, rows, w.plain(NORM_WEIGHT, (hp.hidden_size,)), hp.rms_eps, "/norm")
    head = w.plain(lm_head_weight(hp), (hp.vocab_size, hp.hidden_size))
    g.output(make_lm_head(g, rows, head), names.LOGITS, "float32", ["R", hp.vocab_size])


def _make_taps(g: GraphBuilder, layer_outputs: list[str], dtype: str, width: int) -> None:
    """Concatenate the tapped layers' outputs [T, H] -> [1, T, n_taps * H]."""
    joined = layer_outputs[0]
    if len(layer_outputs) > 1:
        joined = g.node("Concat", layer_outputs, name="/taps/Concat", axis=-1)
    joined = g.node("Unsqueeze", [joined, g.const([0])], name="/taps/Unsqueeze")
    g.output(joined, names.TAPS, dtype, [1, "T", width])
