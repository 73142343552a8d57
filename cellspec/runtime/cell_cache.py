"""The cell cache: one pool of KV cells shared by every sequence (llama.cpp's unified cache).

Bookkeeping only (numpy, no device code). A sequence sees exactly one cell per position
0..pos(seq)-1; its view is the position -> cell map `seq_cells[seq]`. A cell may be seen by
several sequences (after `seq_clone`); it is free when no sequence sees it. The last cell is
the scratch cell: static steps write their padding rows there, and it is never handed out.

Every mutator validates before it changes anything and raises `InvalidArgument` naming the
offending value. A step is planned by `declare_step` (pure) and applied by `commit_step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cellspec.errors import InvalidArgument

PAD_SEQ = -1  # seq id of a padding row in a declared step

NEG_INF = np.float32(-np.inf)


@dataclass(frozen=True)
class StepPlan:
    """What one step reads and writes. T = tokens (padding included), N = cells read."""

    seq_ids: np.ndarray  # [T] int64, PAD_SEQ for padding rows
    positions: np.ndarray  # [T] int64
    cells: np.ndarray  # [T] int64, the cell each token's keys/values are written to
    cells_read: np.ndarray  # [N] int64
    attn_bias: np.ndarray  # [T, N + T] float32, 0 or -inf over [cells_read ; step tokens]
    attn_bias_window: np.ndarray | None  # as attn_bias, for sliding-window layers
    version: int  # the cache version the plan was made against
    writes: bool = True  # False: a read-only step (a DFlash block), never committed


class CellCache:
    def __init__(self, max_cells: int, window: int = 0) -> None:
        if max_cells < 2:
            raise InvalidArgument(f"max_cells {max_cells}: need at least 2 (one is scratch)")
        if window < 0:
            raise InvalidArgument(f"window {window}: expected >= 0")
        self.max_cells = max_cells
        self.window = window
        self.scratch_cell = max_cells - 1
        self.cell_pos = np.full(max_cells, -1, dtype=np.int64)  # -1 = free
        self.cell_refs = np.zeros(max_cells, dtype=np.int64)  # sequences that see the cell
        self.seq_cells: dict[int, np.ndarray] = {}
        self.version = 0

    # -- queries ---------------------------------------------------------------------------

    def has_seq(self, seq: int) -> bool:
        return seq in self.seq_cells

    def pos(self, seq: int) -> int:
        """The next position of `seq`: the number of positions it sees."""
        return len(self._cells_of(seq))

    def cells_of(self, seq: int) -> np.ndarray:
        return self._cells_of(seq).copy()

    @property
    def num_used(self) -> int:
        return int(np.count_nonzero(self.cell_refs))

    @property
    def num_free(self) -> int:
        return self.max_cells - 1 - self.num_used

    # -- sequence mutators -----------------------------------------------------------------

    def seq_new(self, seq: int) -> None:
        if seq < 0 or seq in self.seq_cells:
            raise InvalidArgument(f"seq {seq}: already exists or negative")
        self.seq_cells[seq] = np.zeros(0, dtype=np.int64)
        self.version += 1

    def seq_rm(self, seq: int) -> None:
        """Drop `seq`; its cells that no other sequence sees become free."""
        cells = self._cells_of(seq)
        self._release(cells)
        del self.seq_cells[seq]
        self.version += 1

    def seq_clone(self, src: int, dst: int, upto: int) -> None:
        """`dst` sees the cells `src` sees at positions < upto; nothing is copied."""
        cells = self._cells_of(src)
        if dst < 0 or dst in self.seq_cells:
            raise InvalidArgument(f"seq {dst}: already exists or negative")
        if not 0 <= upto <= len(cells):
            raise InvalidArgument(f"seq {src}: clone position {upto} outside 0..{len(cells)}")
        shared = cells[:upto].copy()
        self.cell_refs[shared] += 1
        self.seq_cells[dst] = shared
        self.version += 1

    def rewind(self, seq: int, pos: int) -> None:
        """Forget positions >= pos of `seq`; cells no other sequence sees become free."""
        cells = self._cells_of(seq)
        if not 0 <= pos <= len(cells):
            raise InvalidArgument(f"seq {seq}: rewind position {pos} outside 0..{len(cells)}")
        self._release(cells[pos:])
        self.seq_cells[seq] = cells[:pos].copy()
        self.version += 1

    def clear(self) -> None:
        self.cell_pos[:] = -1
        self.cell_refs[:] = 0
        self.seq_cells.clear()
        self.version += 1

    # -- steps -----------------------------------------------------------------------------

    def declare_step(
        self, seq_ids: np.ndarray, positions: np.ndarray, causal: bool = True,
        writes: bool = True,
    ) -> StepPlan:
        """Plan a step without changing anything. Each sequence's tokens must continue it:
        their positions are pos(seq), pos(seq)+1, ... in order. PAD_SEQ rows pad the step.
        Not causal: a token sees every token of its sequence in the step (a DFlash block).
        Not writing: every token's keys/values go to the scratch cell and the plan cannot be
        committed, so the step needs no free cells."""
        seq_ids = np.asarray(seq_ids, dtype=np.int64)
        positions = np.asarray(positions, dtype=np.int64)
        if seq_ids.shape != positions.shape or seq_ids.ndim != 1 or seq_ids.size == 0:
            raise InvalidArgument(
                f"step of {seq_ids.shape} seq ids and {positions.shape} positions")
        is_pad = seq_ids == PAD_SEQ
        real_seqs = list(dict.fromkeys(seq_ids[~is_pad].tolist()))
        for seq in real_seqs:
            mine = positions[seq_ids == seq]
            expected = np.arange(self.pos(seq), self.pos(seq) + mine.size)
            if not np.array_equal(mine, expected):
                raise InvalidArgument(
                    f"seq {seq}: step positions {mine.tolist()} do not continue from "
                    f"{self.pos(seq)}")
        cells = np.full(seq_ids.size, self.scratch_cell, dtype=np.int64)
        if writes:
            num_real = int(np.count_nonzero(~is_pad))
            free = np.flatnonzero(self.cell_refs[: self.scratch_cell] == 0)
            if free.size < num_real:
                raise InvalidArgument(f"step needs {num_real} cells, {free.size} are free")
            cells[~is_pad] = free[:num_real]
        read = [self.seq_cells[seq] for seq in real_seqs]
        cells_read = np.unique(np.concatenate(read)) if read else np.zeros(0, np.int64)
        bias, bias_window = self._make_bias(seq_ids, positions, cells_read, causal)
        return StepPlan(seq_ids, positions, cells, cells_read, bias, bias_window, self.version,
                        writes)

    def commit_step(self, plan: StepPlan) -> None:
        """Apply a plan made against the current version: its tokens' cells become theirs."""
        if not plan.writes:
            raise InvalidArgument("a read-only step cannot be committed")
        if plan.version != self.version:
            raise InvalidArgument(
                f"step planned at version {plan.version}, cache is at {self.version}")
        real = plan.seq_ids != PAD_SEQ
        cells, seqs, positions = plan.cells[real], plan.seq_ids[real], plan.positions[real]
        self.cell_pos[cells] = positions
        self.cell_refs[cells] += 1
        for seq in dict.fromkeys(seqs.tolist()):
            self.seq_cells[seq] = np.concatenate([self.seq_cells[seq], cells[seqs == seq]])
        self.version += 1

    def _make_bias(
        self, seq_ids: np.ndarray, positions: np.ndarray, cells_read: np.ndarray, causal: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        # visible[t, j]: token t sees column j of [cells_read ; step tokens].
        num_tokens, num_read = seq_ids.size, cells_read.size
        visible = np.zeros((num_tokens, num_read + num_tokens), dtype=bool)
        column = np.full(self.max_cells, -1, dtype=np.int64)
        column[cells_read] = np.arange(num_read)
        key_pos = np.concatenate([self.cell_pos[cells_read], positions])
        for seq in dict.fromkeys(seq_ids.tolist()):
            rows = np.flatnonzero(seq_ids == seq)
            if seq == PAD_SEQ:
                visible[rows, num_read + rows] = True  # padding sees only itself
                continue
            visible[np.ix_(rows, column[self.seq_cells[seq]])] = True
            same = num_read + rows
            visible[np.ix_(rows, same)] = (
                positions[rows][None, :] <= positions[rows][:, None] if causal else True)
        bias = np.where(visible, np.float32(0), NEG_INF).astype(np.float32)
        if self.window == 0:
            return bias, None
        near = positions[:, None] - key_pos[None, :] < self.window
        return bias, np.where(visible & near, np.float32(0), NEG_INF).astype(np.float32)

    # -- invariants ------------------------------------------------------------------------

    def check(self) -> None:
        """Assert every invariant of the pool (tests call this after every operation)."""
        refs = np.zeros(self.max_cells, dtype=np.int64)
        for seq, cells in self.seq_cells.items():
            assert cells.dtype == np.int64 and cells.ndim == 1, seq
            assert np.unique(cells).size == cells.size, f"seq {seq} sees a cell twice"
            assert not np.any(cells == self.scratch_cell), f"seq {seq} sees the scratch cell"
            assert np.array_equal(self.cell_pos[cells], np.arange(cells.size)), f"seq {seq}"
            refs[cells] += 1
        assert np.array_equal(refs, self.cell_refs), "cell reference counts disagree"
        assert np.all((self.cell_pos == -1) == (self.cell_refs == 0)), "free cells keep positions"

    def snapshot(self) -> tuple:
        """A deep copy of the state, comparable with ==, for tests."""
        seqs = tuple(sorted((s, tuple(c.tolist())) for s, c in self.seq_cells.items()))
        return seqs, tuple(self.cell_pos.tolist()), tuple(self.cell_refs.tolist())

    def _cells_of(self, seq: int) -> np.ndarray:
        cells = self.seq_cells.get(seq)
        if cells is None:
            raise InvalidArgument(f"seq {seq}: no such sequence in the cache")
        return cells

    def _release(self, cells: np.ndarray) -> None:
        self.cell_refs[cells] -= 1
        self.cell_pos[cells[self.cell_refs[cells] == 0]] = -1
