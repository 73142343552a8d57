"""The DFlash draft graphs of DESIGN.md's Method ABI, emitted from a z-lab draft checkpoint.

draft_context
  in:  hidden [C, n_taps * hidden] (the target's taps of verified tokens), positions [C]
  out: k_new.{i} / v_new.{i} [C, KV, D] for every draft layer i: fc -> hidden_norm ->
       k_proj / v_proj -> k_norm (keys) -> rope (keys). The runtime commits them to the draft pool.
draft_block
  in:  tokens [O, block] (each owner's anchor then mask ids), positions [O * block],
       cells_read [N], attn_bias [O * block, N + O * block] float32 (0 or -inf: each block sees
       its owner's context cells and, bidirectionally, its own block), k_pool.{i} / v_pool.{i}
       [max_cells, KV, D] of the draft pool, read only.
  out: logits [O * block, V] float32. Block keys/values are never committed.

The math is z-lab's DFlashDraftModel (tests/reference/dflash_ref.py cites it line by line):
context keys/values come from `hidden_norm(fc(taps))` without the layer's input_layernorm; the
block is embedded with the target's embedding; its queries, keys and values pass
input_layernorm, q_norm / k_norm and rope; block attention is non-causal; final `norm`, then the
target's LM head. The draft's initializers are named `draft.{z-lab name}`; the embedding and LM
head are the target's, borrowed by name from the shared WeightStore.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from cellspec import artifact as names
from cellspec.artifact import DraftMethod, LayerCache
from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export.arch import Hparams, rope_inv_freq
from cellspec.export.draft_checkpoint import DraftCheckpoint, draft_tensor_shapes, load_draft
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
from cellspec.export.target import EMBED_WEIGHT, lm_head_weight
from cellspec.export.weights import WeightStore, numpy_dtype

CONTEXT_GRAPH = "draft_context.onnx"
BLOCK_GRAPH = "draft_block.onnx"
WEIGHT_PREFIX = "draft."
DEFAULT_MAX_OWNERS = 4


class _DraftWeights:
    """Draft tensors by z-lab name, shape-checked, stored once as `draft.{name}` in the model
    dtype (Linear weights transposed to [in, out] as `draft.{name}.T`)."""

    def __init__(self, draft: DraftCheckpoint, store: WeightStore, g: GraphBuilder) -> None:
        self.draft, self.store, self.g = draft, store, g
        self.shapes = draft_tensor_shapes(draft.spec)
        self.dtype = numpy_dtype(g.dtype)

    def plain(self, name: str) -> str:
        return self._stored(f"{WEIGHT_PREFIX}{name}", lambda: self._fetch(name))

    def transposed(self, name: str) -> str:
        return self._stored(f"{WEIGHT_PREFIX}{name}.T", lambda: self._fetch(name).T)

    def _stored(self, key: str, load) -> str:
        if key not in self.store:
            array = load()
            if array.dtype != self.dtype:
                array = array.astype(np.float32).astype(self.dtype)
            self.store.add(key, array)
        return self.g.weight(self.store.get(key))

    def _fetch(self, name: str) -> np.ndarray:
        array = np.asarray(self.draft.tensors[name])
        if array.shape != self.shapes[name]:
            raise InvalidCheckpoint(
                f"draft tensor {name}: shape {array.shape}, expected {self.shapes[name]}")
        return array


def _make_heads(g: GraphBuilder, w: _DraftWeights, hp: Hparams, i: int, x: str, which: str,
                heads: int) -> str:
    """x [T, hidden] -> {which}_proj (+ {which}_norm for q and k) -> [T, heads, D]."""
    p, name = f"layers.{i}.self_attn.", f"/layers.{i}/attn/{which}_proj"
    y = make_linear(g, x, w.transposed(f"{p}{which}_proj.weight"), name)
    y = g.node("Reshape", [y, g.const([-1, heads, hp.head_dim])], name=f"{name}/ReshapeHeads")
    if which == "v":
        return y
    return make_rms_norm(g, y, w.plain(f"{p}{which}_norm.weight"), hp.rms_eps,
                         f"/layers.{i}/attn/{which}_norm")


def _make_kv(g: GraphBuilder, w: _DraftWeights, hp: Hparams, i: int, x: str, cos: str,
             sin: str) -> tuple[str, str]:
    """Rotated keys and values [T, KV, D] of layer i from x [T, hidden]."""
    k = _make_heads(g, w, hp, i, x, "k", hp.num_kv_heads)
    k = make_rope(g, k, cos, sin, f"/layers.{i}/attn/k_rope")
    return k, _make_heads(g, w, hp, i, x, "v", hp.num_kv_heads)


def make_draft_context_graph(draft: DraftCheckpoint, store: WeightStore,
                             dtype: str = "float32") -> onnx.ModelProto:
    """hidden [C, n_taps * hidden], positions [C] -> k_new.{i} / v_new.{i} [C, KV, D]."""
    hp, spec = draft.spec.hp, draft.spec
    g = GraphBuilder("draft_context", dtype)
    w = _DraftWeights(draft, store, g)
    g.input(names.HIDDEN, dtype, ["C", len(spec.tap_layer_ids) * hp.hidden_size])
    g.input(names.POSITIONS, "int64", ["C"])
    x = make_linear(g, names.HIDDEN, w.transposed("fc.weight"), "/fc")
    x = make_rms_norm(g, x, w.plain("hidden_norm.weight"), hp.rms_eps, "/hidden_norm")
    cos, sin = make_rope_tables(g, names.POSITIONS, rope_inv_freq(hp))
    for i in range(hp.num_layers):
        k, v = _make_kv(g, w, hp, i, x, cos, sin)
        g.output(k, names.k_new(i), dtype, ["C", hp.num_kv_heads, hp.head_dim])
        g.output(v, names.v_new(i), dtype, ["C", hp.num_kv_heads, hp.head_dim])
    return g.make_model()


def _make_block_layer(g: GraphBuilder, w: _DraftWeights, hp: Hparams, i: int, x: str,
                      cos: str, sin: str) -> str:
    """One draft layer on the block's residual stream x [Q, hidden], Q = O * block."""
    p, kv, d = f"layers.{i}.", hp.num_kv_heads, hp.head_dim
    normed = make_rms_norm(g, x, w.plain(f"{p}input_layernorm.weight"), hp.rms_eps,
                           f"/layers.{i}/input_layernorm")
    q = _make_heads(g, w, hp, i, normed, "q", hp.num_heads)
    q = make_rope(g, q, cos, sin, f"/layers.{i}/attn/q_rope")
    k, v = _make_kv(g, w, hp, i, normed, cos, sin)
    # keys/values: [pool[cells_read] (owners' contexts) ; this call's blocks], masked by attn_bias
    keys = make_kv_concat(g, names.k_pool(i), names.CELLS_READ, k, f"/layers.{i}/attn/keys")
    values = make_kv_concat(g, names.v_pool(i), names.CELLS_READ, v, f"/layers.{i}/attn/values")
    out = make_attention(g, q, keys, values, names.ATTN_BIAS, kv, d, hp.num_heads // kv,
                         f"/layers.{i}/attn")
    out = make_linear(g, out, w.transposed(f"{p}self_attn.o_proj.weight"), f"/layers.{i}/o_proj")
    x = g.node("Add", [x, out], name=f"/layers.{i}/attn/residual/Add")
    normed = make_rms_norm(g, x, w.plain(f"{p}post_attention_layernorm.weight"), hp.rms_eps,
                           f"/layers.{i}/post_attention_layernorm")
    mlp = make_mlp(g, normed, w.transposed(f"{p}mlp.gate_proj.weight"),
                   w.transposed(f"{p}mlp.up_proj.weight"),
                   w.transposed(f"{p}mlp.down_proj.weight"), f"/layers.{i}/mlp")
    return g.node("Add", [x, mlp], name=f"/layers.{i}/mlp/residual/Add")


def make_draft_block_graph(draft: DraftCheckpoint, target: Hparams, store: WeightStore,
                           max_cells: int, dtype: str = "float32") -> onnx.ModelProto:
    """tokens [O, block], positions [Q], cells_read [N], attn_bias [Q, N + Q], pools ->
    logits [Q, V] float32 (Q = O * block). The target's embedding and LM head must already be
    in `store` (export the target first)."""
    hp, block = draft.spec.hp, draft.spec.block_size
    borrowed = (EMBED_WEIGHT, lm_head_weight(target))
    absent = [n for n in borrowed if n not in store]
    if absent:
        raise InvalidArgument(f"weight store lacks the target's {absent[0]}: export the target "
                              "into the same store before the draft")
    g = GraphBuilder("draft_block", dtype)
    w = _DraftWeights(draft, store, g)
    g.input(names.TOKENS, "int64", ["O", block])
    g.input(names.POSITIONS, "int64", ["Q"])
    g.input(names.CELLS_READ, "int64", ["N"])
    g.input(names.ATTN_BIAS, "float32", ["Q", "S"])  # S = N + Q
    for i in range(hp.num_layers):
        g.input(names.k_pool(i), dtype, [max_cells, hp.num_kv_heads, hp.head_dim])
        g.input(names.v_pool(i), dtype, [max_cells, hp.num_kv_heads, hp.head_dim])
    tokens = g.node("Reshape", [names.TOKENS, g.const([-1])], name="/tokens/Reshape")
    embed, head = (g.weight(store.get(n)) for n in borrowed)
    x = make_embedding(g, embed, tokens)
    cos, sin = make_rope_tables(g, names.POSITIONS, rope_inv_freq(hp))
    for i in range(hp.num_layers):
        x = _make_block_layer(g, w, hp, i, x, cos, sin)
    x = make_rms_norm(g, x, w.plain("norm.weight"), hp.rms_eps, "/norm")
    g.output(make_lm_head(g, x, head), names.LOGITS, "float32", ["Q", target.vocab_size])
    return g.make_model()


def export_draft(draft: str | Path | DraftCheckpoint, target: Hparams, store: WeightStore,
                 out_dir: str | Path, *, dtype: str = "float32", max_cells: int,
                 max_owners: int = DEFAULT_MAX_OWNERS,
                 ) -> tuple[DraftMethod, tuple[LayerCache, ...]]:
    """Write draft_context.onnx and draft_block.onnx into out_dir (weights into `store`, which
    already holds the target's). Returns the manifest's draft method and draft cache geometry.
    The target graph must return taps of exactly `DraftMethod.tap_layer_ids`, in that order."""
    if not isinstance(max_owners, int) or max_owners < 1:
        raise InvalidArgument(f"max_owners {max_owners!r}: expected an integer >= 1")
    if not isinstance(draft, DraftCheckpoint):
        draft = load_draft(draft, target)
    spec, out_dir = draft.spec, Path(out_dir)
    block = make_draft_block_graph(draft, target, store, max_cells, dtype)
    context = make_draft_context_graph(draft, store, dtype)
    onnx.save(context, str(out_dir / CONTEXT_GRAPH))
    onnx.save(block, str(out_dir / BLOCK_GRAPH))
    method = DraftMethod(context_graph=CONTEXT_GRAPH, block_graph=BLOCK_GRAPH,
                         block_size=spec.block_size, tap_layer_ids=spec.tap_layer_ids,
                         mask_token_id=spec.mask_token_id, max_owners=max_owners,
                         num_layers=spec.hp.num_layers)
    geometry = tuple(LayerCache(spec.hp.num_kv_heads, spec.hp.head_dim, 0)
                     for _ in range(spec.hp.num_layers))
    return method, geometry
