"""The target model over a backend: plan each piece of a step, run it, commit it.

`TargetModel.forward` takes a packed step (one contiguous run of tokens per sequence), cuts it
into rectangular pieces (planner), and for each: pads it as the backend's shape policy says,
plans it on the cell cache, has the backend run it (the backend commits the keys and values),
and commits the plan to the cache. It returns the logits rows asked for and the taps. Callers
validate first; a failure surfaces as `ExecutionFailed` after earlier pieces were committed, so
the caller must poison the sequences it touched.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec import artifact as names
from cellspec.artifact import LayerCache, Manifest
from cellspec.errors import InvalidArtifact
from cellspec.rewrite import ATTN_SEQLENS, grouped_feeds
from cellspec.runtime.backend import (
    TAPS_POOL,
    Backend,
    Engine,
    TensorSpec,
    TreeGrowth,
    TreeVerdict,
)
from cellspec.runtime.cell_cache import CellCache, StepPlan
from cellspec.runtime.draws import DRAWN, Draws, greedy_draws
from cellspec.runtime.planner import PieceShape, step_pieces
from cellspec.runtime.trees import ancestor_mask, depths_of


@dataclass(frozen=True)
class ForwardResult:
    """One row per requested logit index, in request order: the drawn tokens when the forward
    was given draws, else the logits."""

    tokens: np.ndarray | None  # [R] int64
    logits: np.ndarray | None  # [R, V] float32


@dataclass(frozen=True)
class TreeStep:
    """A tree verify planned before its trees are known (TargetModel.plan_tree)."""

    plan: StepPlan
    shape: PieceShape
    owners: int  # O sequences
    width: int  # tokens each
    slots: np.ndarray  # [O * width]: each token's slot in the padded step, row-major

    @property
    def stride(self) -> int:
        """Draws per owner where the step's GREEDY holds them: every slot of a static step's
        rows, else the asked ones (owner o's at o * stride)."""
        return self.shape.width if self.shape.is_static else self.width


@dataclass
class MethodStats:
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        """One more call, of `tokens` tokens, that took `seconds`."""
        self.calls += 1
        self.tokens += tokens
        self.seconds += seconds


class TargetModel:
    def __init__(self, folder: Path, manifest: Manifest, backend: Backend) -> None:
        self.manifest, self.backend = manifest, backend
        self.engine = backend.load_engine(folder / manifest.target.graph)
        check_target_graph(manifest, self.engine)
        self.cache = CellCache(manifest.max_cells, manifest.window)
        dtype = self.engine.inputs[names.k_pool(0)].dtype
        self.pools = backend.make_kv_pools(manifest.max_cells, manifest.target_cache, dtype)
        # with a draft, each token's taps stay in a pool by its cell, as its keys do: the
        # draft gathers them from there (DraftModel.drain), no step hands them around
        self.taps = None
        if manifest.target.tap_layer_ids:
            width = len(manifest.target.tap_layer_ids) * manifest.model.hidden_size
            self.taps = backend.make_pools(manifest.max_cells, [(TAPS_POOL, names.TAPS)], width,
                                           dtype)
        self.run_pools = [self.pools] + ([self.taps] if self.taps else [])  # a step binds both
        self.policy = backend.shape_policy(manifest, folder)
        self.max_width = manifest.max_step_width
        self.stats: dict[str, MethodStats] = defaultdict(MethodStats)

    @property
    def vocab_size(self) -> int:
        return self.manifest.model.vocab_size

    def forward(self, seq_ids: np.ndarray, tokens: np.ndarray, logit_indices: np.ndarray,
                draws: Draws | None = None,
                meanwhile: Callable[[], None] | None = None) -> ForwardResult:
        """Feed tokens [T] to seq_ids [T] (one contiguous run per sequence, continuing from its
        frontier); for the tokens at logit_indices [R], draw the next token by `draws` (one per
        row) where the logits are, or, with no draws, return the logits. `meanwhile` is called
        once every token's cell is the sequence's in the cache and the last run is queued,
        before its outputs come back (see Backend.run)."""
        rows = logit_indices.size
        logits = None if draws is not None else np.empty((rows, self.vocab_size), np.float32)
        drawn = np.empty(rows, np.int64) if draws is not None else None
        slot = np.full(seq_ids.size, -1, dtype=np.int64)  # token -> row-major slot in a piece
        pieces = step_pieces(seq_ids, self.max_width)
        several = len(pieces) > 1
        for k, (width, index) in enumerate(pieces):  # index [S, Q]: packed token of each slot
            plan, shape = self._plan(seq_ids[index[:, 0]], width)
            slot[index] = (np.arange(index.shape[0])[:, None] * shape.width
                           + np.arange(width)[None, :])
            # the logits rows in this piece (every one where it is the only piece)
            here = np.flatnonzero(slot[logit_indices] >= 0) if several else slice(None)
            self.cache.commit_step(plan)  # the run only reads the plan
            out = self._run(plan, shape, tokens[index], slot[logit_indices[here]],
                            draws.take(here) if draws is not None and several else draws,
                            meanwhile if k == len(pieces) - 1 else None)
            slot[index] = -1
            if draws is not None:
                drawn[here] = out[DRAWN]
            else:
                logits[here] = out[names.LOGITS]
        return ForwardResult(drawn, logits)

    def plan_tree(self, seq_ids: np.ndarray, width: int) -> TreeStep:
        """Plan a verify of `width` rows (at most the widest step) for each of seq_ids [O]
        (distinct), before its trees are known; nothing changes until `forward_tree`."""
        assert width <= self.max_width, "a tree step is one piece"
        plan, shape = self._plan(seq_ids, width)
        slots = (np.arange(seq_ids.size)[:, None] * shape.width + np.arange(width)).reshape(-1)
        return TreeStep(plan, shape, seq_ids.size, width, slots)

    def forward_tree(self, step: TreeStep, tokens: np.ndarray, tree: np.ndarray, draws: Draws,
                     meanwhile: Callable[[], None] | None = None) -> ForwardResult:
        """Feed each planned sequence its row of tokens [O, width] and draw a token for every
        one, as `forward` would; tree [O, width]: each token's parent as an offset in its row,
        -1 for the row's first (runtime/trees.py). A token then sits at its row's first
        position plus its depth and sees only its ancestors among the row; the cache takes the
        row's tokens at consecutive positions, in row order, for the caller to keep one path of
        (CellCache.keep_path). Only on a backend that `launches` (every one that verifies
        trees exactly: Backend.exact_trees)."""
        return self.launch_tree(step, tokens, tree, draws)(meanwhile)

    def launch_tree(self, step: TreeStep, tokens: np.ndarray, tree: np.ndarray | None,
                    draws: Draws, grow: TreeGrowth | None = None,
                    walk: TreeVerdict | None = None
                    ) -> Callable[..., ForwardResult]:
        """Queue the verify `forward_tree` runs, without committing its plan or waiting for it
        (only where the backend `launches`). The call returned finishes it: it commits the
        plan (the cache must still be at the plan's version: nothing changed it since, and
        nothing else ran this engine), calls `meanwhile` behind
        the verify and gives what forward_tree gives. Left unfinished, the verify changes
        nothing the cache holds: its keys, values and taps went to cells that stay free. tree
        None: the device grows the trees (`grow`, OrtDeviceBackend.launch) into a step staged
        as a chain, whose tokens give each row's anchor (column 0) only. walk: planned before
        the last verify's verdict, from its anchors with every row of its trees in the cache
        (grown ones): the device walks them into the staged inputs first (TreeVerdict), and
        the call takes the plan rebased after keep_path (CellCache.rebase_step) to commit.
        Its `tokens_first`: the backend's (the draws come back by a copy queued behind the
        verify, so `meanwhile` may queue the next verify)."""
        assert tokens.shape == (step.owners, step.width), "the planned rows"
        assert tree is None or tree.shape == tokens.shape, "a parent per token"
        assert (tree is None) == (grow is not None), "trees given or grown"
        assert self.backend.launches, f"backend {self.backend.name} does not launch runs"
        start = time.perf_counter()
        feeds, spread = self._feeds(step.plan, step.shape, tokens, step.slots, draws, tree)
        finish = self.backend.launch(self.engine, self.run_pools, feeds, [], step.plan.cells,
                                     spread, static=step.shape.is_static, grow=grow, walk=walk)
        seconds = time.perf_counter() - start

        def done(meanwhile: Callable[[], None] | None = None,
                 plan: StepPlan | None = None) -> ForwardResult:
            start = time.perf_counter()
            self.cache.commit_step(plan or step.plan)  # the run only reads the plan
            drawn = finish(meanwhile)[DRAWN]
            if step.shape.is_static:
                drawn = drawn[step.slots]
            self.stats[step.shape.label].add(int(step.plan.counts.sum()),
                                             seconds + time.perf_counter() - start)
            return ForwardResult(drawn, None)

        done.tokens_first = finish.tokens_first  # type: ignore[attr-defined]
        return done

    def _plan(self, seqs: np.ndarray, width: int) -> tuple[StepPlan, PieceShape]:
        """A step of `width` tokens for each of seqs, padded as the shape policy says."""
        rows = seqs.size
        longest = max(self.cache.pos(int(s)) for s in seqs)
        shape = self.policy.shape(rows, width, longest)
        plan = self.cache.declare_step(seqs, [width] * rows, shape.width, shape.cells,
                                       rows=shape.rows)
        return plan, shape

    def decode_chain(self, seq_ids: np.ndarray, tokens: np.ndarray, draws: list[Draws],
                     on_step: Callable[[list[int]], bool] | None = None) -> np.ndarray:
        """Up to len(draws) decode steps of the sequences seq_ids [R] (distinct, at their
        frontiers): the first feeds `tokens` [R], each later one the tokens the step before
        drew (by draws[k], one row per sequence). Returns the drawn tokens [steps run, R], as
        that many `forward` calls would. `on_step(tokens of a step)` is called for every step
        run, in order; once it returns True no more steps start (on a backend that runs ahead,
        the step already running when it is told finishes: one more). Where the backend runs
        ahead, the host plans each step while the device runs the one before, and the drawn
        tokens stay on the device (each step's fed to the next where it is)."""
        rows = seq_ids.size
        one_wide = self.policy.shape(rows, 1, 1).width == 1  # drawn rows = token rows
        if not self.backend.runs_ahead or len(draws) == 1 or not one_wide:
            out = np.empty((len(draws), rows), np.int64)
            every = np.arange(rows)
            for k, step_draws in enumerate(draws):
                tokens = out[k] = self.forward(seq_ids, tokens, every, step_draws).tokens
                if on_step is not None and on_step(tokens.tolist()):
                    return out[: k + 1]
            return out
        chain = self.backend.start_chain(len(draws), rows)
        placeholder = np.zeros((rows, 1), np.int64)
        try:
            for k, step_draws in enumerate(draws):
                start = time.perf_counter()
                plan, shape = self._plan(seq_ids, 1)
                slots = np.arange(rows) * shape.width
                feeds, step_draws = self._feeds(plan, shape, tokens[:, None] if k == 0
                                                else placeholder, slots, step_draws)
                self.cache.commit_step(plan)  # the launch only reads the plan
                chain.launch(self.engine, self.run_pools, feeds, plan.cells, step_draws,
                             shape.is_static, fed_back=k > 0)
                self.stats[f"chain {shape.label}"].add(rows, time.perf_counter() - start)
                if on_step is not None and k and on_step(chain.row(k - 1)):
                    break  # step k runs on: it is reported below
            out = chain.tokens()
            if on_step is not None:
                on_step(out[-1].tolist())
            return out
        except BaseException:
            chain.abandon()
            raise

    def _feeds(self, plan: StepPlan, shape: PieceShape, tokens: np.ndarray, rows: np.ndarray,
               draws: Draws | None, tree: np.ndarray | None = None
               ) -> tuple[dict[str, np.ndarray], Draws | None]:
        """A planned piece's feeds, and its draws: on a static shape every slot's logits row
        is computed (rows and draws spread to all slots; `_run` picks the asked ones out).
        tree [S, Q]: the parents of the piece's rows (forward), whose positions and masks it
        sets."""
        padded = np.zeros((shape.rows, shape.width), np.int64)
        padded[: tokens.shape[0], : tokens.shape[1]] = tokens
        if shape.is_static:
            asked, rows = rows, np.arange(shape.rows * shape.width)
            draws = None if draws is None else _spread(draws, asked, rows.size)
        positions, mask = plan.positions, plan.attn_mask
        if tree is not None:
            positions, mask = tree_feeds(plan, tree)
        feeds = {names.TOKENS: padded, names.POSITIONS: positions,
                 names.CELL_TABLE: plan.cell_table, names.ATTN_MASK: mask,
                 names.LOGITS_ROWS: rows.astype(np.int64)}
        if plan.attn_mask_window is not None:
            feeds[names.ATTN_MASK_WINDOW] = plan.attn_mask_window
        if ATTN_SEQLENS in self.engine.inputs:  # the CUDA provider's form of the attention
            feeds |= grouped_feeds(plan.lengths, plan.cell_table.shape[1], shape.width)
        return feeds, draws

    def _run(self, plan: StepPlan, shape: PieceShape, tokens: np.ndarray, rows: np.ndarray,
             draws: Draws | None, meanwhile: Callable[[], None] | None = None
             ) -> dict[str, np.ndarray]:
        """Run one planned piece; returns the outputs of the requested `rows` (slots)."""
        asked = rows
        feeds, draws = self._feeds(plan, shape, tokens, rows, draws)
        start = time.perf_counter()
        outputs = [] if draws is not None else [names.LOGITS]
        out = self.backend.run(self.engine, self.run_pools, feeds, outputs, plan.cells, draws,
                               static=shape.is_static, meanwhile=meanwhile)
        if shape.is_static:
            for name in (DRAWN, names.LOGITS):
                if name in out:
                    out[name] = out[name][asked]
        self.stats[shape.label].add(int(plan.counts.sum()), time.perf_counter() - start)
        return out


def tree_feeds(plan: StepPlan, tree: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions and attn_mask of a tree step (TargetModel.forward): the plan's, with each
    of the first tree.shape[0] rows' first tree.shape[1] tokens at its row's frontier plus its
    depth, seeing its ancestors among the row's tokens instead of every token before it. The
    plan keeps its own (the cache commits consecutive positions)."""
    rows, width = tree.shape
    cells = plan.cell_table.shape[1]
    positions, mask = plan.positions.copy(), plan.attn_mask.copy()
    for row in range(rows):
        parents = tree[row]
        positions[row, :width] = plan.lengths[row] + depths_of(parents)
        mask[row, 0, :width, cells: cells + width] = ancestor_mask(parents)
    return positions, mask


def _spread(draws: Draws, rows: np.ndarray, count: int) -> Draws:
    """Draws for `count` rows: `draws` at `rows`, greedy elsewhere."""
    if draws.is_greedy:
        return greedy_draws(count)
    index = np.full(count, -1, dtype=np.int64)
    index[rows] = np.arange(rows.size)
    both = Draws.concat([draws, greedy_draws(1)])
    return both.take(np.where(index >= 0, index, draws.num_rows))


def check_target_graph(manifest: Manifest, engine: Engine) -> None:
    """Refuse a graph whose inputs or outputs disagree with the manifest, naming the field."""
    model, graph = manifest.model, manifest.target.graph
    inputs, outputs = engine.inputs, engine.outputs
    required = [names.TOKENS, names.POSITIONS, names.LOGITS_ROWS, names.CELL_TABLE,
                names.ATTN_MASK] + ([names.ATTN_MASK_WINDOW] if manifest.window else [])
    for name in required:
        _require(name in inputs, f"{graph}: input {name} missing")
    pools = sorted(n for n in inputs if n.startswith("k_pool."))
    _require(len(pools) == model.num_layers,
             f"{graph}: {len(pools)} key pools, manifest field model.num_layers says "
             f"{model.num_layers}")
    check_pools(graph, inputs, manifest.max_cells, manifest.target_cache, "target_cache")
    for i in range(len(manifest.target_cache)):
        for new in (names.k_new(i), names.v_new(i)):
            _require(new in outputs, f"{graph}: output {new} missing")
    for name in (names.LOGITS, names.GREEDY):
        _require(name in outputs, f"{graph}: output {name} missing")
    vocab = outputs[names.LOGITS].shape[-1]
    _require(not isinstance(vocab, int) or vocab == model.vocab_size,
             f"{graph}: logits width {vocab}, manifest field model.vocab_size says "
             f"{model.vocab_size}")
    _check_dtype(graph, inputs[names.k_pool(0)], model.dtype)
    has_taps = names.TAPS in outputs
    _require(has_taps == bool(manifest.target.tap_layer_ids),
             f"{graph}: taps output {'present' if has_taps else 'missing'}, manifest field "
             f"target.tap_layer_ids is {list(manifest.target.tap_layer_ids)}")
    if has_taps:
        width = outputs[names.TAPS].shape[-1]
        expected = len(manifest.target.tap_layer_ids) * model.hidden_size
        _require(not isinstance(width, int) or width == expected,
                 f"{graph}: taps width {width}, manifest says {expected}")


def check_pools(graph: str, inputs: dict[str, TensorSpec], max_cells: int,
                layers: tuple[LayerCache, ...], field: str) -> None:
    """Every layer's k/v pool input is [max_cells, kv_heads * head_dim] as the manifest says."""
    for i, layer in enumerate(layers):
        expected = (max_cells, layer.row_width)
        for pool in (names.k_pool(i), names.v_pool(i)):
            shape = inputs[pool].shape if pool in inputs else None
            _require(shape == expected, f"{graph}: input {pool} is {shape}, manifest fields "
                     f"max_cells/{field}[{i}] say {expected}")


_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": None}


def _check_dtype(graph: str, pool: TensorSpec, dtype: str) -> None:
    _require(dtype in _DTYPES and pool.dtype == _DTYPES[dtype],
             f"{graph}: pools hold {pool.dtype}, manifest field model.dtype says {dtype!r}")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidArtifact(message)
