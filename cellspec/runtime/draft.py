"""The DFlash draft on engines: its own cell cache and pools, drain and propose.

`drain` pushes verified tokens' target hidden states (taps) through `draft_context` and commits
the resulting keys/values into the draft pool. `propose` runs `draft_block` on [anchor, mask...]
blocks of up to `max_owners` sessions per call and takes the argmax of rows 1..n_draft.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec import artifact as names
from cellspec.artifact import Manifest
from cellspec.errors import InvalidArtifact
from cellspec.runtime.cell_cache import CellCache
from cellspec.runtime.engine import load_engine
from cellspec.runtime.target import MethodStats, check_pools, make_pools


@dataclass(frozen=True)
class ProposalRequest:
    sid: int
    anchor: int  # the pending token, fed to the target at `position`
    position: int


class DraftModel:
    def __init__(self, folder: Path, manifest: Manifest, backend: str, threads: int | None):
        assert manifest.draft is not None
        self.method = manifest.draft
        self.context = load_engine(folder / self.method.context_graph, backend, threads)
        self.block = load_engine(folder / self.method.block_graph, backend, threads)
        self.layers = range(self.method.num_layers)
        self.max_context_rows = manifest.max_step_width
        _check_draft_graphs(manifest, self.context.outputs, self.block.inputs)
        self.cache = CellCache(manifest.max_cells)
        self.pools = make_pools(manifest.max_cells, manifest.draft_cache,
                                self.block.inputs[names.k_pool(0)].dtype)
        self.stats: dict[str, MethodStats] = defaultdict(MethodStats)

    def drain(self, seq_ids: np.ndarray, hidden: np.ndarray, positions: np.ndarray) -> None:
        """Commit context keys/values of hidden [C, n_taps * hidden] rows at positions [C], in
        calls of at most `max_context_rows` rows."""
        for start in range(0, len(seq_ids), self.max_context_rows):
            rows = slice(start, start + self.max_context_rows)
            self._drain_chunk(seq_ids[rows], hidden[rows], positions[rows])

    def _drain_chunk(self, seq_ids: np.ndarray, hidden: np.ndarray, positions: np.ndarray):
        plan = self.cache.declare_step(seq_ids, positions)
        out = self._run(self.context, "draft_context", len(seq_ids),
                        {names.HIDDEN: hidden, names.POSITIONS: positions},
                        [name(i) for i in self.layers for name in (names.k_new, names.v_new)])
        for i in self.layers:
            self.pools[names.k_pool(i)][plan.cells] = out[names.k_new(i)]
            self.pools[names.v_pool(i)][plan.cells] = out[names.v_new(i)]
        self.cache.commit_step(plan)

    def propose(self, requests: list[ProposalRequest], n_draft: int) -> np.ndarray:
        """[len(requests), n_draft] greedy proposals, `max_owners` blocks per draft_block call."""
        chunks = [requests[i: i + self.method.max_owners]
                  for i in range(0, len(requests), self.method.max_owners)]
        return np.concatenate([self._propose_chunk(chunk, n_draft) for chunk in chunks])

    def _propose_chunk(self, requests: list[ProposalRequest], n_draft: int) -> np.ndarray:
        block = self.method.block_size
        tokens = np.full((len(requests), block), self.method.mask_token_id, dtype=np.int64)
        tokens[:, 0] = [r.anchor for r in requests]
        seq_ids = np.repeat([r.sid for r in requests], block)
        positions = np.concatenate([np.arange(r.position, r.position + block) for r in requests])
        # Each block sees its owner's context cells and, bidirectionally, itself; its keys and
        # values are never committed, so the plan takes no cells.
        plan = self.cache.declare_step(seq_ids, positions, causal=False, writes=False)
        feeds = {names.TOKENS: tokens, names.POSITIONS: positions,
                 names.CELLS_READ: plan.cells_read, names.ATTN_BIAS: plan.attn_bias, **self.pools}
        out = self._run(self.block, f"draft_block_{len(requests)}", len(requests), feeds,
                        [names.LOGITS])
        logits = out[names.LOGITS].reshape(len(requests), block, -1)
        return np.argmax(logits[:, 1: n_draft + 1], axis=-1).astype(np.int64)

    def _run(self, engine, method: str, count: int, feeds: dict, outputs: list[str]) -> dict:
        start = time.perf_counter()
        out = engine.run(feeds, outputs)
        stats = self.stats[method]
        stats.calls += 1
        stats.tokens += count
        stats.seconds += time.perf_counter() - start
        return out


def _check_draft_graphs(manifest: Manifest, context_outputs: dict, block_inputs: dict) -> None:
    draft = manifest.draft
    assert draft is not None
    if len(manifest.draft_cache) != draft.num_layers:
        raise InvalidArtifact(f"manifest field draft_cache: {len(manifest.draft_cache)} layers, "
                              f"draft.num_layers says {draft.num_layers}")
    check_pools(draft.block_graph, block_inputs, manifest.max_cells, manifest.draft_cache,
                "draft_cache")
    for i in range(draft.num_layers):
        for new in (names.k_new(i), names.v_new(i)):
            if new not in context_outputs:
                raise InvalidArtifact(f"{draft.context_graph}: output {new} missing")
