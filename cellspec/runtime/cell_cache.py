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
from functools import lru_cache

import numpy as np

from cellspec.errors import InvalidArgument
from cellspec.runtime.types import replaced

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
    is_real: np.ndarray  # [S, Q] bool: the tokens that belong to a sequence (read-only)
    writes: bool = True  # False: a read-only step (a DFlash block), never committed
    full: bool = False  # every token is real (is_real all True): no padding to pick out

    def new_cells(self) -> np.ndarray:
        """The cells the real tokens write, in row order."""
        return self.of_real(self.cells)

    def of_real(self, values: np.ndarray) -> np.ndarray:
        """The entries of `values` [S, Q] at the real tokens, in row order."""
        return values.reshape(-1) if self.full else values[self.is_real]


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
        self._free_floor = 0  # every cell below it is used (a search hint, see _lowest_free)

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

    def keep_path(self, seq: int, start: int, keep: list[int]) -> None:
        """Of the positions >= start of `seq` (a verified tree's rows, committed in row order),
        keep those at offsets `keep` (strictly increasing) as positions start, start + 1, ...;
        forget the rest (cells no other sequence sees become free)."""
        cells = self._cells_of(seq)
        if not 0 <= start <= len(cells):
            raise InvalidArgument(f"seq {seq}: path start {start} outside 0..{len(cells)}")
        rows = cells[start:]
        tail = rows.tolist()  # a verify's rows: a few, so as Python ints
        keep = list(keep)
        if any(not isinstance(k, (int, np.integer)) for k in keep) or (keep and (
                keep[0] < 0 or keep[-1] >= len(tail)
                or any(b <= a for a, b in zip(keep, keep[1:])))):
            raise InvalidArgument(f"seq {seq}: path offsets {keep}: expected increasing "
                                  f"offsets in 0..{len(tail) - 1}")
        keep = [int(k) for k in keep]
        refs = self.cell_refs
        moved = [(i, tail[k]) for i, k in enumerate(keep) if k != i]  # (new offset, cell)
        if any(refs[cell] > 1 for _, cell in moved):  # a moved cell must be this sequence's
            raise InvalidArgument(f"seq {seq}: a path cell that would move is shared with "
                                  "another sequence")
        kept = set(keep)
        self._release_few([cell for k, cell in enumerate(tail) if k not in kept])
        # in place (a verify's rows are few): the kept cells move down to their positions
        # (k >= i: each is read before it is written over); the others stay where they are
        for i, cell in moved:
            cells[start + i] = cell
            self.cell_pos[cell] = start + i
        self.seq_cells[seq] = cells[: start + len(keep)]
        self.version += 1

    def clear(self) -> None:
        self.cell_pos[:] = -1
        self.cell_refs[:] = 0
        self.seq_cells.clear()
        self._free_floor = 0
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
        committed, so the step needs no free cells.

        A decode step plans every step of a generation, so this is written for the host's
        time: the rows are checked as Python lists (S is small) and the arrays made once each."""
        seq_list, count_list = self._row_lists(seq_ids, counts, rows)
        lengths_list = self._check_rows(seq_list, count_list)
        longest = max(lengths_list)
        width = max(count_list) if width is None else width
        num_cells = longest if num_cells is None else num_cells
        if width < max(count_list) or num_cells < longest:
            raise InvalidArgument(f"step shape [{len(seq_list)}, {width}] reading {num_cells} "
                                  f"cells cannot hold counts {count_list} and lengths "
                                  f"{lengths_list}")
        rows_count = len(seq_list)
        seq_ids = np.array(seq_list, dtype=np.int64)
        counts = np.array(count_list, dtype=np.int64)
        lengths = np.array(lengths_list, dtype=np.int64)
        columns = _columns(max(width, num_cells))
        # every row full (a verify, a decode step in its own bucket): no padding token
        full = min(count_list) == width
        if full:
            is_real = _all_true(rows_count, width)
            positions = lengths[:, None] + columns[:width]
        else:
            is_real = columns[:width] < counts[:, None]
            positions = (lengths[:, None] + columns[:width]) * is_real
        if writes and full:
            cells = self._lowest_free(sum(count_list)).reshape(rows_count, width)
        else:
            cells = np.full((rows_count, width), self.scratch_cell, dtype=np.int64)
            if writes:
                cells[is_real] = self._lowest_free(sum(count_list))
        table = np.full((rows_count, num_cells), self.scratch_cell, dtype=np.int64)
        seq_cells = self.seq_cells
        for row, (seq, length) in enumerate(zip(seq_list, lengths_list)):
            if length:
                table[row, :length] = seq_cells[seq]
        mask, mask_window = self._make_masks(positions, is_real, lengths, num_cells, causal,
                                             full)
        return StepPlan(seq_ids, counts, positions, cells, table, lengths, mask, mask_window,
                        self.version, is_real, writes, full)

    def rebase_step(self, plan: StepPlan) -> StepPlan:
        """A writing plan made at an earlier version, for the sequences' frontiers now: the
        same rows and new cells, its tokens at positions from each row's current frontier,
        at the current version (to commit). Only where none of its new cells was taken since
        (a tree's verify planned before its walk, rebased after keep_path freed the rows
        off the path). Its cell_table, lengths and masks stay the old ones: its run read
        those."""
        if not plan.writes:
            raise InvalidArgument("a read-only step cannot be rebased")
        if np.count_nonzero(self.cell_refs[plan.new_cells()]):
            raise InvalidArgument("step planned on cells another step has taken since")
        lengths = np.array(self._check_rows(plan.seq_ids.tolist(), plan.counts.tolist()),
                           np.int64)
        positions = lengths[:, None] + _columns(plan.positions.shape[1])
        if not plan.full:
            positions *= plan.is_real
        return replaced(plan, positions=positions, version=self.version)

    def commit_step(self, plan: StepPlan) -> None:
        """Apply a plan made against the current version: its tokens' cells become theirs."""
        if not plan.writes:
            raise InvalidArgument("a read-only step cannot be committed")
        if plan.version != self.version:
            raise InvalidArgument(
                f"step planned at version {plan.version}, cache is at {self.version}")
        new_cells = plan.new_cells()
        self.cell_pos[new_cells] = plan.of_real(plan.positions)
        self.cell_refs[new_cells] += 1
        if (new_cells.size and new_cells[0] == self._free_floor
                and new_cells[-1] - new_cells[0] + 1 == new_cells.size):
            self._free_floor += new_cells.size  # the block at the floor is used now
        for row, (seq, count) in enumerate(zip(plan.seq_ids.tolist(), plan.counts.tolist())):
            if count:
                self._append(seq, plan.cells[row, :count])
        self.version += 1

    def _append(self, seq: int, new: np.ndarray) -> None:
        """seq_cells[seq] += new. A sequence's cells are a view of a buffer with room to grow
        (doubling), so a decode step appends without copying the sequence's whole map; every
        other mutator replaces the map with an array of its own (no view of a buffer)."""
        cells = self.seq_cells[seq]
        length, end = cells.size, cells.size + new.size
        buffer = cells.base
        if buffer is None or buffer.size < end:
            buffer = np.empty(max(64, 2 * end), dtype=np.int64)
            buffer[:length] = cells
        buffer[length:end] = new
        self.seq_cells[seq] = buffer[:end]

    @staticmethod
    def _row_lists(seq_ids, counts, rows: int | None) -> tuple[list[int], list[int]]:
        """The rows as lists of ints, padded with PAD_SEQ rows to `rows`."""
        seq_array = np.asarray(seq_ids, dtype=np.int64)
        count_array = np.asarray(counts, dtype=np.int64)
        if seq_array.shape != count_array.shape or seq_array.ndim != 1 or seq_array.size == 0:
            raise InvalidArgument(f"step of {seq_array.shape} rows and {count_array.shape} "
                                  "counts")
        seq_list, count_list = seq_array.tolist(), count_array.tolist()
        if rows is not None:
            if rows < len(seq_list):
                raise InvalidArgument(f"step of {rows} rows cannot hold {len(seq_list)}")
            seq_list += [PAD_SEQ] * (rows - len(seq_list))
            count_list += [0] * (rows - len(count_list))
        return seq_list, count_list

    def _check_rows(self, seq_ids: list[int], counts: list[int]) -> list[int]:
        """Validate the rows; returns each row's frontier (0 for padding rows)."""
        lengths, bad_count, known = [], False, self.seq_cells
        for seq, count in zip(seq_ids, counts):  # one pass (a decode step checks S rows)
            if seq == PAD_SEQ:
                bad_count |= count != 0
                lengths.append(0)
            else:
                bad_count |= count < 1
                cells = known.get(seq)
                lengths.append(-1 if cells is None else cells.size)
        real = [seq for seq in seq_ids if seq != PAD_SEQ]
        if len(set(real)) != len(real):
            raise InvalidArgument(f"step rows {seq_ids}: a sequence appears twice")
        if bad_count:
            raise InvalidArgument(f"step counts {counts}: padding rows take 0 tokens, "
                                  "sequences at least 1")
        if -1 in lengths:
            self._cells_of(seq_ids[lengths.index(-1)])  # raises, naming it
        return lengths

    def _lowest_free(self, count: int) -> np.ndarray:
        """The `count` lowest free cells, searched from `_free_floor` (every cell below it is
        used) in growing windows, rather than over the whole pool at every step."""
        floor = self._free_floor
        if floor + count <= self.scratch_cell and \
                not np.count_nonzero(self.cell_refs[floor: floor + count]):
            return np.arange(floor, floor + count)  # the usual case: the cells after the floor
        found, total = [], 0
        start, window = floor, max(256, 4 * count)
        while total < count and start < self.scratch_cell:
            end = min(start + window, self.scratch_cell)
            free = np.flatnonzero(self.cell_refs[start:end] == 0)
            if free.size:
                if not found:
                    self._free_floor = start + int(free[0])  # a hint: no state changes
                    if free.size >= count:  # (after a tree's verdict: its freed rows, then
                        return free[:count] + start  # the cells past them)
                found.append(free + start)
                total += free.size
            elif not found:
                self._free_floor = end
            start, window = end, 2 * window
        if total < count:
            raise InvalidArgument(f"step needs {count} cells, {total} are free")
        return np.concatenate(found)[:count]  # count > 0 here: found is not empty

    def _make_masks(self, positions: np.ndarray, is_real: np.ndarray, lengths: np.ndarray,
                    num_cells: int, causal: bool, full: bool = False
                    ) -> tuple[np.ndarray, np.ndarray | None]:
        """[S, 1, Q, N + Q] visibility. Column j < N is position j of the row's sequence (its
        cell_table), column N + u the row's own token u. full: every token is real."""
        rows, width = positions.shape
        mask = np.empty((rows, 1, width, num_cells + width), dtype=bool)
        own = mask[:, 0, :, num_cells:]  # [S, Q, Q]: both tokens real (and causal), or self
        lower, diagonal = _square_masks(width)
        if full:  # (the general case below, with is_real all True)
            past = mask[:, 0, :, :num_cells]  # column j < N visible iff j < the row's length
            past[:] = False
            for row, length in enumerate(lengths.tolist()):
                past[row, :, :length] = True
            own[:] = lower if causal else True
        else:
            past = _columns(num_cells) < lengths[:, None]  # [S, N]
            np.logical_and(past[:, None, :], is_real[:, :, None], out=mask[:, 0, :, :num_cells])
            np.logical_and(is_real[:, :, None], is_real[:, None, :], out=own)
            if causal:
                own &= lower
            own |= diagonal & ~is_real[:, :, None]  # padding sees itself
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
        assert np.all(self.cell_refs[: self._free_floor] > 0), "a free cell below the floor"

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
        freed = cells[self.cell_refs[cells] == 0]
        self.cell_pos[freed] = -1
        if freed.size:
            self._free_floor = min(self._free_floor, int(np.minimum.reduce(freed)))

    def _release_few(self, cells: list[int]) -> None:
        """_release of a few distinct cells given as ints (a tree's rows off its path), one
        by one: for a few, cheaper on the host than _release's array operations."""
        refs, pos, floor = self.cell_refs, self.cell_pos, self._free_floor
        for cell in cells:
            left = refs[cell] - 1
            refs[cell] = left
            if left == 0:
                pos[cell] = -1
                if cell < floor:
                    floor = cell
        self._free_floor = floor


@lru_cache(maxsize=64)
def _columns(count: int) -> np.ndarray:
    """0 .. count - 1 (read-only: shared by every plan)."""
    columns = np.arange(count, dtype=np.int64)
    columns.flags.writeable = False
    return columns


@lru_cache(maxsize=64)
def _all_true(rows: int, width: int) -> np.ndarray:
    """[rows, width] True (read-only: shared by every plan of that shape)."""
    true = np.ones((rows, width), dtype=bool)
    true.flags.writeable = False
    return true


@lru_cache(maxsize=64)
def _square_masks(width: int) -> tuple[np.ndarray, np.ndarray]:
    """[Q, Q] lower triangle and diagonal (read-only: shared by every plan of this width)."""
    lower = np.tril(np.ones((width, width), dtype=bool))
    diagonal = np.eye(width, dtype=bool)
    lower.flags.writeable = diagonal.flags.writeable = False
    return lower, diagonal
