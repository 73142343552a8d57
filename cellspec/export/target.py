"""The target graph of graph ABI v2 (docs/design.md), emitted from checkpoint weights.

in:  tokens [S, Q], positions [S, Q] (S rows, one sequence each, of Q tokens),
     cell_table [S, N] (row s: the cell of each of its sequence's positions, scratch past its
     length), attn_mask [S, 1, Q, N + Q] bool (columns [cell_table[s] ; row s's tokens]),
     attn_mask_window (only when some layer has a sliding window; those layers use it),
     logits_rows [R] (indices into the S * Q tokens, row-major),
     k_pool.{i} / v_pool.{i} [max_cells, KV * D] in the model dtype, read only.
out: logits [R, V] float32 (final norm + LM head on the rows `logits_rows` only), greedy [R]
     int64 (each row's argmax, the lowest id among ties),
     k_new.{i} / v_new.{i} [S, Q, KV * D] (keys after q/k norm and rope), and with taps
     taps [S, Q, n_taps * hidden]: the outputs of the tapped decoder layers, in the given order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from tqdm import tqdm

from cellspec import artifact as names
from cellspec.export.arch import Hparams, rope_inv_freq
from cellspec.export.graph import (
    GraphBuilder,
    Linear,
    make_embedding,
    make_lm_head,
    make_rope_caches,
    make_skip_rms_norm,
)
from cellspec.export.layers import (
    LayerSpec,
    StepTensors,
    Weights,
    make_layer,
    make_layer_weights,
)
from cellspec.export.weights import WeightStore

EMBED_WEIGHT = "model.embed_tokens.weight"
LM_HEAD_WEIGHT = "lm_head.weight"
NORM_WEIGHT = "model.norm.weight"


def lm_head_weight(hp: Hparams) -> str:
    """The tensor name of the LM head [V, H]: the embedding table when tied."""
    return EMBED_WEIGHT if hp.tie_word_embeddings else LM_HEAD_WEIGHT


@dataclass(frozen=True)
class Embeddings:
    """How the target stores its embedding and LM head; the draft borrows both."""

    table: Linear  # the embedding: a dense [V, H] initializer or 8-bit blocks
    head: Linear  # the LM head: a dense [V, H] initializer (maybe the table) or blocks


def layer_spec(hp: Hparams) -> LayerSpec:
    return LayerSpec(hp.hidden_size, hp.num_heads, hp.num_kv_heads, hp.head_dim,
                     hp.intermediate_size, hp.rms_eps, hp.spec.has_qk_norm, hp.attention_bias,
                     hp.mlp_bias)


def make_target_graph(hp: Hparams, tensors: Mapping[str, np.ndarray], store: WeightStore,
                      dtype: str, max_cells: int, max_context: int, taps: tuple[int, ...] = (),
                      progress: bool = False, quantize: str = "none",
                      accuracy_level: int = 0) -> tuple[onnx.ModelProto, Embeddings]:
    """The target forward graph; weights go to `store`, the graph references them. With
    quantize "int4", projections are 4-bit blocks and the embedding and LM head 8-bit ones."""
    g = GraphBuilder("target", dtype, accuracy_level)
    w = Weights(tensors, store, g, bits=4 if quantize == "int4" else 0)
    step = _make_inputs(g, hp, max_cells, max_context)
    embeddings = make_embeddings(w, hp)
    x, residual = make_embedding(g, embeddings.table, names.TOKENS), None
    spec = layer_spec(hp)
    layer_outputs = []  # the residual stream after each layer
    kv_shape = ["S", "Q", hp.num_kv_heads * hp.head_dim]
    for i in tqdm(range(hp.num_layers), desc="export target", unit="layer", disable=not progress):
        weights = make_layer_weights(w, spec, f"model.layers.{i}.")
        kv = (names.k_new(i), names.v_new(i))
        x, residual, previous = make_layer(g, spec, weights, step, x, residual,
                                           (names.k_pool(i), names.v_pool(i)), f"/layers.{i}",
                                           is_windowed=bool(hp.windows[i]), kv_outputs=kv)
        layer_outputs += [previous] if i else []
        for name in kv:
            g.output(name, name, dtype, kv_shape)
    normed, last = make_skip_rms_norm(g, x, residual, w.plain(NORM_WEIGHT, (hp.hidden_size,)),
                                      hp.rms_eps, "/norm")
    layer_outputs.append(last)
    _make_logits(g, hp, normed, embeddings.head)
    if taps:
        _make_taps(g, [layer_outputs[i] for i in taps], dtype, len(taps) * hp.hidden_size)
    return g.make_model(), embeddings


def make_embeddings(w: Weights, hp: Hparams) -> Embeddings:
    """Dense tables; with quantized weights, 8-bit blocks (a GGUF's Q8_0 as they are) that the
    embedding gathers and the LM head multiplies, one copy when tied."""
    shape = (hp.vocab_size, hp.hidden_size)
    if not w.bits:
        table = w.plain(EMBED_WEIGHT, shape)
        head = table if hp.tie_word_embeddings else w.plain(LM_HEAD_WEIGHT, shape)
        return Embeddings(table, head)
    table = w.quantized([EMBED_WEIGHT], [hp.vocab_size], hp.hidden_size, EMBED_WEIGHT, 8)
    if not w.store.names_with_prefix(f"{EMBED_WEIGHT}.gather_"):  # 4-bit or Q4_1 blocks
        table = w.plain(EMBED_WEIGHT, shape)
    head = w.quantized([lm_head_weight(hp)], [hp.vocab_size], hp.hidden_size,
                       lm_head_weight(hp), 8)
    return Embeddings(table, head)


def _make_inputs(g: GraphBuilder, hp: Hparams, max_cells: int, max_context: int
                 ) -> StepTensors:
    g.input(names.TOKENS, "int64", ["S", "Q"])
    g.input(names.POSITIONS, "int64", ["S", "Q"])
    g.input(names.CELL_TABLE, "int64", ["S", "N"])
    g.input(names.ATTN_MASK, "bool", ["S", 1, "Q", "N + Q"])
    window = None
    if any(hp.windows):
        window = g.input(names.ATTN_MASK_WINDOW, "bool", ["S", 1, "Q", "N + Q"])
    g.input(names.LOGITS_ROWS, "int64", ["R"])
    pool = [max_cells, hp.num_kv_heads * hp.head_dim]
    for i in range(hp.num_layers):
        g.input(names.k_pool(i), g.dtype, pool)
        g.input(names.v_pool(i), g.dtype, pool)
    rope = make_rope_caches(g, rope_inv_freq(hp), max_context)
    return StepTensors(names.POSITIONS, names.CELL_TABLE, names.ATTN_MASK, window, rope)


def _make_logits(g: GraphBuilder, hp: Hparams, normed: str, head: Linear) -> None:
    """normed [S, Q, H] -> the rows `logits_rows` -> logits [R, V] float32."""
    flat = g.node("Reshape", [normed, g.const([-1, hp.hidden_size])], name="/logits_rows/Flat")
    rows = g.node("Gather", [flat, names.LOGITS_ROWS], name="/logits_rows/Gather", axis=0)
    logits = make_lm_head(g, rows, head)
    g.output(logits, names.LOGITS, "float32", ["R", hp.vocab_size])
    # the greedy token of each row (the lowest id among ties), so that a device backend can
    # return R ids instead of R x V logits
    greedy = g.node("ArgMax", [logits], name="/greedy/ArgMax", axis=1, keepdims=0,
                    select_last_index=0)
    g.output(greedy, names.GREEDY, "int64", ["R"])


def _make_taps(g: GraphBuilder, layer_outputs: list[str], dtype: str, width: int) -> None:
    """Concatenate the tapped layers' outputs [S, Q, H] -> [S, Q, n_taps * H]."""
    joined = layer_outputs[0]
    if len(layer_outputs) > 1:
        joined = g.node("Concat", layer_outputs, name="/taps/Concat", axis=-1)
    g.output(joined, names.TAPS, dtype, ["S", "Q", width])
