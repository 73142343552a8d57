"""The cell cache: one pool of KV cells shared by every sequence (llama.cpp's unified cache).

Bookkeeping only (numpy, no device code). A sequence sees exactly one cell per position
0..pos(seq)-1; its view is the position -> cell map `seq_cells[seq]`. A cell may be seen by
several sequences (after `seq_clone`); it is free when no sequence sees it. The last cell is
the scratch cell: padding tokens write their keys/values there, and it is never handed out.

Every mutator validates before it changes anything and raises `InvalidArgument` naming the
offending value. A step is planned by `declare_step` (pure) and applied by `commit_step`.

A step is a rectangle of S rows, one sequence each, of Q tokens (graph ABI v2): row s holds
its sequence's next `counts[s]` tokens, continuing from pos(seq), then padding. Each row reads
only its own sequence's cells through `cell_table[s]`, whose column j is the cell of position
j, so attention costs what the rows actually read, not the union of the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cellspec.errors import InvalidArgument

PAD_SEQ = -1  # seq id of a padding row


@dataclass(frozen=True)
class StepPlan:
    """What one step reads and writes. S rows, Q tokens per row, N cells read per row.

    attn_mask columns are [cell_table[s] (N) ; the row's own Q tokens]. A padding token (a
    padding row, or a column past the row's count) sees only itself, so no row is all False.
    """

    seq_ids: np.ndarray  # [S] int64, PAD_SEQ for padding rows
    counts: np.ndarray  # [S] int64, real tokens per row (0 for padding rows)
    positions: np.ndarray  # [S, Q] int64, 0 for padding tokens
    cells: np.ndarray  # [S, Q] int64, the cell each token's keys/values are written to
    cell_table: np.ndarray  # [S, N] int64, cell of position j at column j, scratch past it
    lengths: np.ndarray  # [S] int64, the columns of cell_table each row reads
    attn_mask: np.ndarray  # [S, 1, Q, N + Q] bool, True where the key is visible
    attn_mask_window: np.ndarray | None  # as attn_mask, for sliding-window layers
    version: int  # the cache version the plan was made against
    writes: bool = True  # False: a read-only step (a DFlash block), never committed

    @property
    def is_real(self) -> np.ndarray:
        """[S, Q] bool: the tokens that belong to a sequence."""
        width = self.positions.shape[1]
        return np.arange(width)[None, :] < self.counts[:, None]


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

    def declare_step(self, seq_ids: np.ndarray, counts: np.ndarray, width: int | None = None,
                     num_cells: int | None = None, causal: bool = True,
                     writes: bool = True, rows: int | None = None) -> StepPlan:
        """Plan a step without changing anything: row s feeds `counts[s]` tokens of sequence
        `seq_ids[s]` at positions pos(seq), pos(seq)+1, ...; PAD_SEQ rows have count 0.
        width: Q (default: the largest count); num_cells: N (default: the longest sequence);
        rows: S, the rows given then PAD_SEQ rows (default: the rows given); each at least what
        the rows need, so a backend can pad to fixed shapes.
        Not causal: a token sees every token of its row (a DFlash block).
        Not writing: every token's keys/values go to the scratch cell and the plan cannot be
        committed, so the step needs no free cells."""
        seq_ids = np.asarray(seq_ids, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        if rows is not None:
            if rows < seq_ids.size:
                raise InvalidArgument(f"step of {rows} rows cannot hold {seq_ids.size}")
            seq_ids = np.r_[seq_ids, np.full(rows - seq_ids.size, PAD_SEQ, np.int64)]
            counts = np.r_[counts, np.zeros(rows - counts.size, np.int64)]
        lengths = self._check_rows(seq_ids, counts)
        width = int(counts.max()) if width is None else width
        num_cells = int(lengths.max(initial=0)) if num_cells is None else num_cells
        if width < counts.max() or num_cells < lengths.max(initial=0):
            raise InvalidArgument(f"step shape [{seq_ids.size}, {width}] reading {num_cells} "
                                  f"cells cannot hold counts {counts.tolist()} and lengths "
                                  f"{lengths.tolist()}")
        is_real = np.arange(width)[None, :] < counts[:, None]
        positions = np.where(is_real, lengths[:, None] + np.arange(width)[None, :], 0)
        cells = np.full((seq_ids.size, width), self.scratch_cell, dtype=np.int64)
        if writes:
            free = np.flatnonzero(self.cell_refs[: self.scratch_cell] == 0)
            if free.size < counts.sum():
                raise InvalidArgument(f"step needs {counts.sum()} cells, {free.size} are free")
            cells[is_real] = free[: counts.sum()]
        table = np.full((seq_ids.size, num_cells), self.scratch_cell, dtype=np.int64)
        for row in np.flatnonzero(seq_ids != PAD_SEQ):
            table[row, : lengths[row]] = self.seq_cells[int(seq_ids[row])]
        mask, mask_window = self._make_masks(positions, is_real, lengths, num_cells, causal)
        return StepPlan(seq_ids, counts, positions, cells, table, lengths, mask, mask_window,
                        self.version, writes)

    def commit_step(self, plan: StepPlan) -> None:
        """Apply a plan made against the current version: its tokens' cells become theirs."""
        if not plan.writes:
            raise InvalidArgument("a read-only step cannot be committed")
        if plan.version != self.version:
            raise InvalidArgument(
                f"step planned at version {plan.version}, cache is at {self.version}")
        is_real = plan.is_real
        self.cell_pos[plan.cells[is_real]] = plan.positions[is_real]
        self.cell_refs[plan.cells[is_real]] += 1
        for row in np.flatnonzero(plan.counts):
            seq = int(plan.seq_ids[row])
            new = plan.cells[row, : plan.counts[row]]
            self.seq_cells[seq] = np.concatenate([self.seq_cells[seq], new])
        self.version += 1

    def _check_rows(self, seq_ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Validate the rows; returns each row's frontier (0 for padding rows)."""
        if seq_ids.shape != counts.shape or seq_ids.ndim != 1 or seq_ids.size == 0:
            raise InvalidArgument(f"step of {seq_ids.shape} rows and {counts.shape} counts")
        real = seq_ids[seq_ids != PAD_SEQ]
        if np.unique(real).size != real.size:
            raise InvalidArgument(f"step rows {seq_ids.tolist()}: a sequence appears twice")
        if np.any(counts[seq_ids == PAD_SEQ] != 0) or np.any(counts[seq_ids != PAD_SEQ] < 1):
            raise InvalidArgument(f"step counts {counts.tolist()}: padding rows take 0 tokens, "
                                  "sequences at least 1")
        return np.array([0 if seq == PAD_SEQ else self.pos(int(seq)) for seq in seq_ids],
                        dtype=np.int64)

    def _make_masks(self, positions: np.ndarray, is_real: np.ndarray, lengths: np.ndarray,
                    num_cells: int, causal: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """[S, 1, Q, N + Q] visibility. Column j < N is position j of the row's sequence (its
        cell_table), column N + u the row's own token u."""
        rows, width = positions.shape
        past = np.arange(num_cells)[None, None, :] < lengths[:, None, None]  # [S, 1, N]
        past = past & is_real[:, :, None]  # [S, Q, N]
        own = is_real[:, :, None] & is_real[:, None, :]  # [S, Q, Q]: both tokens real
        if causal:
            own &= np.tril(np.ones((width, width), dtype=bool))[None]
        own |= np.eye(width, dtype=bool)[None] & ~is_real[:, :, None]  # padding sees itself
        mask = np.concatenate([past, own], axis=2)[:, None]
        if self.window == 0:
            return mask, None
        key_pos = np.concatenate([np.broadcast_to(np.arange(num_cells), (rows, num_cells)),
                                  positions], axis=1)  # [S, N + Q]
        # a key is visible iff 0 <= q_pos - k_pos < window; padding (position 0) keeps itself
        near = positions[:, :, None] - key_pos[:, None, :] < self.window  # [S, Q, N + Q]
        return mask, mask & near[:, None]

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
