"""The DFlash draft graphs of graph ABI v2 (docs/design.md), emitted from a z-lab checkpoint.

draft_context
  in:  hidden [S, Q, n_taps * hidden] (the target's taps of verified tokens), positions [S, Q]
  out: k_new.{i} / v_new.{i} [S, Q, KV * D] for every draft layer i: fc -> hidden_norm ->
       k_proj / v_proj -> k_norm (keys) -> rope (keys). The runtime commits them to the draft pool.
draft_block
  in:  tokens [O, block] (each owner's anchor then mask ids), positions [O, block],
       cell_table [O, N] (each owner's context cells in the draft pool), attn_mask
       [O, 1, block, N + block] bool (the owner's context and, bidirectionally, its own block),
       k_pool.{i} / v_pool.{i} [max_cells, KV * D] of the draft pool, read only.
       proposal_rows [P] (the block positions read out, the same for every owner: 1..n_draft).
  out: logits [O * P, V] float32 and proposals [O * P] int64 (the argmax of each row read out,
       the lowest id among ties; owner-major). With a proposal vocabulary of K ids (the draft's
       proposal_vocab.json, manifest draft.proposal_vocab_size K), logits are [O * P, K], over
       those ids in ascending order, and a proposal is the id of their argmax. The whole block
       is computed (its rows attend to each other), but the final norm and LM head run on the
       P rows only. Block keys/values are never committed. top_ids / top_logp [O * P, 4]
       (int64, float32): each row's 4 most probable ids, best first, and their
       log-probabilities (log-softmax over the logits' tokens), a tree's material.

The math is z-lab's DFlashDraftModel (tests/reference/dflash_ref.py cites it line by line):
context keys/values come from `hidden_norm(fc(taps))` without the layer's input_layernorm; the
block is embedded with the target's embedding; its queries, keys and values pass
input_layernorm, q_norm / k_norm and rope; block attention is non-causal; final `norm`, then the
target's LM head. The draft's initializers are named `draft.{z-lab name}`; the embedding and LM
head are the target's (`Embeddings`), shared in the one WeightStore.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx

from cellspec import artifact as names
from cellspec.artifact import DraftMethod, LayerCache
from cellspec.errors import InvalidArgument
from cellspec.export.arch import Hparams, rope_inv_freq
from cellspec.export.draft_checkpoint import DraftCheckpoint, load_draft
from cellspec.export.graph import (
    GraphBuilder,
    Linear,
    QuantLinear,
    make_embedding,
    make_head_norm,
    make_linear,
    make_lm_head,
    make_rms_norm,
    make_rope,
    make_rope_caches,
    make_skip_rms_norm,
    make_split,
)
from cellspec.export.layers import (
    LayerSpec,
    StepTensors,
    Weights,
    borrow,
    make_layer,
    make_layer_weights,
)
from cellspec.export.target import Embeddings
from cellspec.export.weights import WeightStore

CONTEXT_GRAPH = "draft_context.onnx"
PROPOSAL_HEAD = "draft.proposal_head"  # [K, H]: the target head's rows of the proposable ids
PROPOSAL_IDS = "draft.proposal_ids"  # [K] int64: those ids, ascending
BLOCK_GRAPH = "draft_block.onnx"
WEIGHT_PREFIX = "draft."
DEFAULT_MAX_OWNERS = 4


class _DraftWeights(Weights):
    """Draft tensors by z-lab name, stored once as `draft.{name}` in the model dtype."""

    def __init__(self, draft: DraftCheckpoint, store: WeightStore, g: GraphBuilder) -> None:
        super().__init__(draft.tensors, store, g, WEIGHT_PREFIX)


def _layer_spec(hp: Hparams) -> LayerSpec:
    return LayerSpec(hp.hidden_size, hp.num_heads, hp.num_kv_heads, hp.head_dim,
                     hp.intermediate_size, hp.rms_eps, True)


def make_draft_context_graph(draft: DraftCheckpoint, store: WeightStore, max_positions: int,
                             dtype: str = "float32") -> onnx.ModelProto:
    """hidden [S, Q, n_taps * hidden], positions [S, Q] -> k_new.{i} / v_new.{i} [S, Q, KV*D]."""
    hp, spec = draft.spec.hp, draft.spec
    g = GraphBuilder("draft_context", dtype)
    w = _DraftWeights(draft, store, g)
    width, h, d = len(spec.tap_layer_ids) * hp.hidden_size, hp.hidden_size, hp.head_dim
    kv_rows = hp.num_kv_heads * d
    g.input(names.HIDDEN, dtype, ["S", "Q", width])
    g.input(names.POSITIONS, "int64", ["S", "Q"])
    rope = make_rope_caches(g, rope_inv_freq(hp), max_positions)
    x = make_linear(g, names.HIDDEN, w.linear(["fc.weight"], [h], width, "fc.weight"), "/fc")
    x = make_rms_norm(g, x, w.plain("hidden_norm.weight", (h,)), hp.rms_eps, "/hidden_norm")
    for i in range(hp.num_layers):
        p, k_out, v_out = f"layers.{i}.self_attn.", names.k_new(i), names.v_new(i)
        kv = w.linear([f"{p}k_proj.weight", f"{p}v_proj.weight"], [kv_rows] * 2, h,
                      f"{p}kv_proj.weight")
        both = make_linear(g, x, kv, f"/layers.{i}/attn/kv_proj")
        k, _ = make_split(g, both, [kv_rows, kv_rows], f"/layers.{i}/attn/kv_proj",
                          [None, v_out])
        k = make_head_norm(g, k, w.plain(f"{p}k_norm.weight", (d,)), hp.num_kv_heads, d,
                           hp.rms_eps, f"/layers.{i}/attn/k_norm")
        make_rope(g, k, names.POSITIONS, rope, hp.num_kv_heads, f"/layers.{i}/attn/k_rope",
                  out=k_out)
        for name in (k_out, v_out):
            g.output(name, name, dtype, ["S", "Q", kv_rows])
    return g.make_model()


def make_draft_block_graph(draft: DraftCheckpoint, target: Hparams, embeddings: Embeddings,
                           store: WeightStore, max_cells: int, max_positions: int,
                           dtype: str = "float32", accuracy_level: int = 0) -> onnx.ModelProto:
    """tokens [O, block], positions [O, block], cell_table [O, N], attn_mask [O, 1, block,
    N + block], proposal_rows [P], pools -> logits [O * P, V] float32, proposals [O * P].

    accuracy_level: the borrowed LM head's, when the target's is block-quantized (the
    target's level: at 0 ONNX Runtime's CPU kernel for 8-bit blocks is over 10x slower)."""
    hp, block = draft.spec.hp, draft.spec.block_size
    g = GraphBuilder("draft_block", dtype, accuracy_level)
    w = _DraftWeights(draft, store, g)
    g.input(names.TOKENS, "int64", ["O", block])
    g.input(names.POSITIONS, "int64", ["O", block])
    g.input(names.CELL_TABLE, "int64", ["O", "N"])
    g.input(names.ATTN_MASK, "bool", ["O", 1, block, f"N + {block}"])
    g.input(names.PROPOSAL_ROWS, "int64", ["P"])
    for i in range(hp.num_layers):
        g.input(names.k_pool(i), dtype, [max_cells, hp.num_kv_heads * hp.head_dim])
        g.input(names.v_pool(i), dtype, [max_cells, hp.num_kv_heads * hp.head_dim])
    step = StepTensors(names.POSITIONS, names.CELL_TABLE, names.ATTN_MASK, None,
                       make_rope_caches(g, rope_inv_freq(hp), max_positions))
    x = make_embedding(g, borrow(g, store, embeddings.table), names.TOKENS)
    residual, spec = None, _layer_spec(hp)
    for i in range(hp.num_layers):
        weights = make_layer_weights(w, spec, f"layers.{i}.")
        x, residual, _ = make_layer(g, spec, weights, step, x, residual,
                                    (names.k_pool(i), names.v_pool(i)), f"/layers.{i}")
    # Only the rows read out pass the final norm (with its residual add) and the LM head.
    x = g.node("Gather", [x, names.PROPOSAL_ROWS], name="/proposal_rows/GatherX", axis=1)
    if residual is not None:
        residual = g.node("Gather", [residual, names.PROPOSAL_ROWS], axis=1,
                          name="/proposal_rows/GatherResidual")
    normed, _ = make_skip_rms_norm(g, x, residual, w.plain("norm.weight", (hp.hidden_size,)),
                                   hp.rms_eps, "/norm")
    flat = g.node("Reshape", [normed, g.const([-1, hp.hidden_size])], name="/rows/Flat")
    vocab = draft.proposal_vocab
    if vocab is None:
        logits = make_lm_head(g, flat, borrow(g, store, embeddings.head))
    else:  # the head's rows of the proposable ids only, stored once as their own initializer
        logits = make_lm_head(g, flat, proposal_head(g, store, embeddings.head, vocab),
                              name="/proposal_head")
    g.output(logits, names.LOGITS, "float32",
             ["O * P", target.vocab_size if vocab is None else len(vocab)])
    # flat, owner-major: a Reshape to [O, P] would need P as a shape tensor (Shape -> Concat),
    # which ONNX Runtime places on the CPU provider
    best = g.node("ArgMax", [logits], name="/proposals/ArgMax", axis=1, keepdims=0,
                  select_last_index=0, outputs=None if vocab else [names.PROPOSALS])
    if vocab is not None:  # ascending ids: the lowest index among ties is the lowest id
        best = g.node("Gather", [g.const(list(vocab), name=PROPOSAL_IDS), best],
                      name="/proposals/Ids", axis=0, outputs=[names.PROPOSALS])
    g.output(best, names.PROPOSALS, "int64", ["O * P"])
    # a tree's material (runtime/trees.py): each row's best ids and their log-probabilities.
    # LogSoftmax, not ReduceLogSumExp: the CUDA provider reduces through cuDNN, ~2 ms for a
    # block's rows on the H200 (every block call paid it, whether it asked for these or not)
    log_softmax = g.node("LogSoftmax", [logits], name="/top/LogSoftmax", axis=1)
    indices = names.TOP_IDS if vocab is None else "/top/indices"  # columns are ids, or not
    g.node("TopK", [log_softmax, g.const([names.TOP_K])], name="/top/TopK", axis=1,
           largest=1, sorted=1, outputs=[names.TOP_LOGP, indices])
    if vocab is not None:
        g.node("Gather", [g.const(list(vocab), name=PROPOSAL_IDS), indices],
               name="/top/Ids", axis=0, outputs=[names.TOP_IDS])
    g.output(names.TOP_IDS, names.TOP_IDS, "int64", ["O * P", names.TOP_K])
    g.output(names.TOP_LOGP, names.TOP_LOGP, "float32", ["O * P", names.TOP_K])
    return g.make_model()


def proposal_head(g: GraphBuilder, store: WeightStore, head: Linear,
                  vocab: tuple[int, ...]) -> Linear:
    """The target head's rows of the `vocab` ids, added to `store` once under PROPOSAL_HEAD: a
    dense [K, H] matrix, or the blocks of those rows (every array of a block-quantized head
    is by row, but for Q4_1's offsets, [num_blocks, N], which are by column)."""
    ids = np.asarray(vocab, dtype=np.int64)
    if not isinstance(head, QuantLinear):
        return g.weight(store.add(PROPOSAL_HEAD, np.ascontiguousarray(store.read(head)[ids])))
    rows = dataclasses.replace(head, prefix=PROPOSAL_HEAD, out_features=len(ids))
    for suffix in ("qweight", "scales", "zero_points", "offsets"):
        if head.initializer(suffix) in store:
            array = store.read(head.initializer(suffix))
            picked = array[:, ids] if suffix == "offsets" else array[ids]
            g.weight(store.add(rows.initializer(suffix), np.ascontiguousarray(picked)))
    return rows


def export_draft(draft: str | Path | DraftCheckpoint, target: Hparams, embeddings: Embeddings,
                 store: WeightStore, out_dir: str | Path, *, dtype: str = "float32",
                 max_cells: int, max_context: int, max_owners: int = DEFAULT_MAX_OWNERS,
                 accuracy_level: int = 0) -> tuple[DraftMethod, tuple[LayerCache, ...]]:
    """Write draft_context.onnx and draft_block.onnx into out_dir (weights into `store`, which
    already holds the target's). Returns the manifest's draft method and draft cache geometry.
    The target graph must return taps of exactly `DraftMethod.tap_layer_ids`, in that order."""
    if not isinstance(max_owners, int) or max_owners < 1:
        raise InvalidArgument(f"max_owners {max_owners!r}: expected an integer >= 1")
    if not isinstance(draft, DraftCheckpoint):
        draft = load_draft(draft, target)
    spec, out_dir = draft.spec, Path(out_dir)
    # a block starting at the last position reaches block_size - 1 positions past the context
    positions = max_context + spec.block_size
    block = make_draft_block_graph(draft, target, embeddings, store, max_cells, positions, dtype,
                                   accuracy_level)
    context = make_draft_context_graph(draft, store, positions, dtype)
    onnx.save(context, str(out_dir / CONTEXT_GRAPH))
    onnx.save(block, str(out_dir / BLOCK_GRAPH))
    vocab = draft.proposal_vocab
    method = DraftMethod(context_graph=CONTEXT_GRAPH, block_graph=BLOCK_GRAPH,
                         block_size=spec.block_size, tap_layer_ids=spec.tap_layer_ids,
                         mask_token_id=spec.mask_token_id, max_owners=max_owners,
                         num_layers=spec.hp.num_layers,
                         proposal_vocab_size=0 if vocab is None else len(vocab))
    geometry = tuple(LayerCache(spec.hp.num_kv_heads, spec.hp.head_dim, 0)
                     for _ in range(spec.hp.num_layers))
    return method, geometry
