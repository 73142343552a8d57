"""The DFlash draft over a backend: its own cell cache and pools, drain and propose.

`drain` pushes verified tokens' target hidden states (taps, gathered by cell from the target's
taps pool where the backend keeps it) through `draft_context`; the backend commits the resulting
keys/values into the draft pools. `propose` runs `draft_block` on
[anchor, mask...] blocks of up to `max_owners` sessions per call; the graph reads out only block
rows 1..n_draft (`proposal_rows`) and returns their argmax (`proposals`) and logits;
`propose_with_confidence` also fetches the logits, for the draft's probability of each proposal;
`propose_choices` fetches each row's top choices instead (top_ids, top_logp), for a tree.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec import artifact as names
from cellspec.artifact import Manifest
from cellspec.errors import InvalidArtifact
from cellspec.runtime.backend import TAPS_POOL, Backend, Gather, Pools, TreeVerdict
from cellspec.runtime.cell_cache import CellCache
from cellspec.runtime.planner import PieceShape, step_pieces
from cellspec.runtime.target import MethodStats, check_pools


@dataclass(frozen=True)
class ProposalRequest:
    sid: int
    anchor: int  # the pending token, fed to the target at `position`
    position: int


class DraftModel:
    def __init__(self, folder: Path, manifest: Manifest, backend: Backend) -> None:
        assert manifest.draft is not None
        self.method, self.backend = manifest.draft, backend
        self.context = backend.load_draft_engine(folder / self.method.context_graph)
        self.block = backend.load_draft_engine(folder / self.method.block_graph)
        check_draft_graphs(manifest, self.context.outputs, self.block)
        self.cache = CellCache(manifest.max_cells)
        self.pools = backend.make_kv_pools(manifest.max_cells, manifest.draft_cache,
                                           self.block.inputs[names.k_pool(0)].dtype)
        self.policy = backend.shape_policy(manifest, folder)
        self.max_width = manifest.max_step_width
        self.stats: dict[str, MethodStats] = defaultdict(MethodStats)

    def drain(self, seq_ids: np.ndarray, cells: np.ndarray, taps: Pools,
              positions: np.ndarray | None = None) -> None:
        """Commit the context keys/values of the target tokens in `cells` [C] (whose taps are
        in the target's `taps` pool), one contiguous run per sequence continuing from its
        draft frontier. `positions` [C]: each token's rotary position where it is not its
        cell's (a tree's rows, committed in row order at positions p + depth; keep_path then
        keeps the accepted ones), else the cells' consecutive positions."""
        for width, index in step_pieces(seq_ids, self.max_width):  # index [S, Q]
            rows = len(index)
            # padded to the backend's shape (a static one replays as a CUDA graph): padding
            # slots read the taps' scratch cell and write the draft's
            shape = self.policy.shape(rows, width, 0)
            plan = self.cache.declare_step(seq_ids[index[:, 0]], [width] * rows, shape.width,
                                           rows=shape.rows)
            read = np.full((shape.rows, shape.width), self.cache.scratch_cell, np.int64)
            read[:rows, :width] = cells[index]
            hidden = Gather(names.HIDDEN, taps, TAPS_POOL, read)
            self.cache.commit_step(plan)  # the run only reads the plan
            fed = plan.positions
            if positions is not None:
                fed = plan.positions.copy()
                fed[:rows, :width] = positions[index]
            self._run(self.context, f"draft_context {shape.label}", int(index.size),
                      {names.POSITIONS: fed}, [], plan.cells, gather=hidden,
                      static=shape.is_static)

    def propose(self, requests: list[ProposalRequest], n_draft: int) -> np.ndarray:
        """[len(requests), n_draft] greedy proposals, `max_owners` blocks per draft_block call."""
        return np.concatenate([self._propose_chunk(chunk, n_draft)[0]
                               for chunk in self._chunks(requests)])

    def propose_with_confidence(self, requests: list[ProposalRequest],
                                n_draft: int) -> tuple[np.ndarray, np.ndarray]:
        """The proposals as `propose` gives them, and the draft's probability of each [len(
        requests), n_draft]: its softmax's largest value at that block row (over the proposal
        vocabulary where the draft has one), from the block's logits."""
        parts = [self._propose_chunk(chunk, n_draft, confidence=True)
                 for chunk in self._chunks(requests)]
        return (np.concatenate([proposals for proposals, _ in parts]),
                np.concatenate([probs for _, probs in parts]))

    @property
    def has_choices(self) -> bool:
        """Whether draft_block gives each row's top choices (artifacts exported before
        2026-12-03 do not)."""
        return names.TOP_IDS in self.block.outputs and names.TOP_LOGP in self.block.outputs

    def propose_choices(self, requests: list[ProposalRequest],
                        n_draft: int) -> tuple[np.ndarray, np.ndarray]:
        """Block rows 1..n_draft's top choices for every request: ids and log-probabilities
        [len(requests), n_draft, TOP_K], best first (a tree's material, runtime/trees.py)."""
        parts = [self._propose_chunk(chunk, n_draft, choices=True)
                 for chunk in self._chunks(requests)]
        return (np.concatenate([ids for ids, _ in parts]),
                np.concatenate([logp for _, logp in parts]))

    def _chunks(self, requests: list[ProposalRequest]) -> list[list[ProposalRequest]]:
        owners = self.method.max_owners
        return [requests[i: i + owners] for i in range(0, len(requests), owners)]

    def queue_choices(self, requests: list[ProposalRequest], n_draft: int,
                      walk: TreeVerdict | None = None
                      ) -> Callable[[], tuple[np.ndarray, np.ndarray] | None] | None:
        """Queue the block of `requests` (at most `max_owners`) on a backend that queues runs
        (`queue`: ort-cuda), and return the call that gives its choices as `propose_choices`
        would, or None where this draft has changed since (its cache, or another block run);
        None where the backend does not queue. The host goes on while the device runs it.
        `walk`: the requests are this cycle's (each at its verify's anchor, every row of its
        tree drained) and the block is the next cycle's, queued before the verify's verdict
        is on the host: the device walks the trees (TreeVerdict) into the feeds, staged here
        from the anchors' positions with every tree row's cell, so the block's outputs are
        those of the block queued after the verdict, for a verify grown from them on the
        device (TreeGrowth). Its choices are never taken: the verdict's keep_path changes
        the draft cache."""
        queue = getattr(self.backend, "queue", None)
        if queue is None or len(requests) > self.method.max_owners:
            return None
        start = time.perf_counter()
        method, shape, feeds = self._block_step(requests, n_draft)
        if walk is not None:
            positions = feeds[names.POSITIONS] = feeds[names.POSITIONS].copy()
            positions[: len(requests)] = np.array([[r.position] for r in requests])
        fetch = queue(self.block, [self.pools], feeds, [names.TOP_IDS, names.TOP_LOGP],
                      static=shape.is_static, walk=walk)
        queued = time.perf_counter() - start
        version = self.cache.version
        if walk is not None:
            self.stats[f"{method} past verdict"].add(len(requests), queued)

        def take() -> tuple[np.ndarray, np.ndarray] | None:
            start = time.perf_counter()
            out = fetch() if self.cache.version == version else None
            if out is not None:
                self.stats[f"{method} ahead"].add(len(requests), queued + time.perf_counter()
                                                  - start)
                return self._choices_of(out, len(requests), n_draft)
            return None

        return take

    def _block_step(self, requests: list[ProposalRequest], n_draft: int
                    ) -> tuple[str, PieceShape, dict[str, np.ndarray]]:
        """The method name, shape and feeds of the draft block of `requests`."""
        block, count = self.method.block_size, len(requests)
        seqs = np.array([r.sid for r in requests], dtype=np.int64)
        longest = max(self.cache.pos(int(s)) for s in seqs)
        shape = self.policy.shape(count, block, longest)
        # Each block sees its owner's context cells and, bidirectionally, itself; its keys and
        # values are never committed, so the plan takes no cells.
        plan = self.cache.declare_step(seqs, [block] * count, block, shape.cells, causal=False,
                                       writes=False, rows=shape.rows)
        tokens = np.full((shape.rows, block), self.method.mask_token_id, dtype=np.int64)
        tokens[:count, 0] = [r.anchor for r in requests]
        feeds = {names.TOKENS: tokens, names.POSITIONS: plan.positions,
                 names.CELL_TABLE: plan.cell_table, names.ATTN_MASK: plan.attn_mask,
                 names.PROPOSAL_ROWS: self._rows(n_draft)}
        return f"draft_block [{shape.rows}x{block}]", shape, feeds

    @staticmethod
    def _choices_of(out: dict[str, np.ndarray], count: int, n_draft: int
                    ) -> tuple[np.ndarray, np.ndarray]:
        top = (count, n_draft, names.TOP_K)
        return (out[names.TOP_IDS][: count * n_draft].reshape(top).astype(np.int64),
                out[names.TOP_LOGP][: count * n_draft].reshape(top))

    def _propose_chunk(self, requests: list[ProposalRequest], n_draft: int,
                       confidence: bool = False, choices: bool = False
                       ) -> tuple[np.ndarray, np.ndarray | None]:
        count = len(requests)
        method, shape, feeds = self._block_step(requests, n_draft)
        wanted = [names.TOP_IDS, names.TOP_LOGP] if choices else \
            [names.PROPOSALS, names.LOGITS] if confidence else [names.PROPOSALS]
        out = self._run(self.block, method, count, feeds, wanted, static=shape.is_static)
        if choices:
            return self._choices_of(out, count, n_draft)
        proposals = out[names.PROPOSALS].reshape(-1, n_draft)[:count].astype(np.int64)
        if not confidence:
            return proposals, None
        logits = out[names.LOGITS][: count * n_draft]
        # the largest softmax value of a row: 1 / sum(exp(logits - max))
        spread = np.exp(logits - logits.max(axis=1, keepdims=True))
        return proposals, (1.0 / spread.sum(axis=1)).reshape(count, n_draft)

    @staticmethod
    @functools.cache
    def _rows(n_draft: int) -> np.ndarray:
        rows = np.arange(1, n_draft + 1, dtype=np.int64)
        rows.flags.writeable = False
        return rows

    def _run(self, engine, method: str, count: int, feeds: dict, outputs: list[str],
             cells: np.ndarray | None = None, static: bool = False,
             gather: Gather | None = None) -> dict:
        start = time.perf_counter()
        out = self.backend.run(engine, [self.pools], feeds, outputs, cells, static=static,
                               gather=gather)
        self.stats[method].add(count, time.perf_counter() - start)
        return out


def check_draft_graphs(manifest: Manifest, context_outputs: dict, block) -> None:
    """The draft graphs agree with the manifest's draft fields, named when they do not."""
    draft = manifest.draft
    assert draft is not None
    if len(manifest.draft_cache) != draft.num_layers:
        raise InvalidArtifact(f"manifest field draft_cache: {len(manifest.draft_cache)} layers, "
                              f"draft.num_layers says {draft.num_layers}")
    check_pools(draft.block_graph, block.inputs, manifest.max_cells, manifest.draft_cache,
                "draft_cache")
    pools = [n for n in block.inputs if n.startswith("k_pool.")]
    if len(pools) != draft.num_layers:
        raise InvalidArtifact(f"{draft.block_graph}: {len(pools)} layers, manifest field "
                              f"draft.num_layers says {draft.num_layers}")
    width = block.inputs[names.TOKENS].shape[-1]
    if width != draft.block_size:
        raise InvalidArtifact(f"{draft.block_graph}: blocks of {width} tokens, manifest field "
                              f"draft.block_size says {draft.block_size}")
    if names.PROPOSAL_ROWS not in block.inputs:
        raise InvalidArtifact(f"{draft.block_graph}: input {names.PROPOSAL_ROWS} missing")
    if names.PROPOSALS not in block.outputs:
        raise InvalidArtifact(f"{draft.block_graph}: output {names.PROPOSALS} missing")
    if names.LOGITS in block.outputs:
        width = block.outputs[names.LOGITS].shape[-1]
        want = draft.proposal_vocab_size or manifest.model.vocab_size
        if width != want:
            raise InvalidArtifact(f"{draft.block_graph}: logits over {width} tokens, manifest "
                                  f"field draft.proposal_vocab_size says {want}")
    for i in range(draft.num_layers):
        for new in (names.k_new(i), names.v_new(i)):
            if new not in context_outputs:
                raise InvalidArtifact(f"{draft.context_graph}: output {new} missing")
