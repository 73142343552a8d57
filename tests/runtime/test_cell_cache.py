"""The cell cache against a brute-force model: every sequence is a list of written values."""

import numpy as np
import pytest

from cellspec.errors import InvalidArgument
from cellspec.runtime.cell_cache import PAD_SEQ, CellCache


class Model:
    """Reference: sequence -> the values written at its positions; the pool stores values."""

    def __init__(self, cache: CellCache):
        self.cache = cache
        self.content = np.full(cache.max_cells, -1, dtype=np.int64)
        self.seqs: dict[int, list[int]] = {}
        self.next_value = 0

    def step(self, seq_ids: list[int], counts: list[int], pad_width: int = 0,
             pad_cells: int = 0) -> None:
        width = max(counts) + pad_width
        cells = max((len(self.seqs[s]) for s in seq_ids if s != PAD_SEQ), default=0) + pad_cells
        plan = self.cache.declare_step(np.array(seq_ids), np.array(counts), width, cells)
        check_plan(self.cache, plan)
        # the lowest free cells, in row order (the search starts at a floor: it must not skip any)
        free = np.flatnonzero(self.cache.cell_refs[: self.cache.scratch_cell] == 0)
        assert plan.cells[plan.is_real].tolist() == free[: sum(counts)].tolist()
        for row, seq in enumerate(seq_ids):
            for column, cell in enumerate(plan.cells[row]):
                if seq == PAD_SEQ or column >= counts[row]:
                    assert cell == self.cache.scratch_cell
                    continue
                assert self.content[cell] == -1 or self.cache.cell_refs[cell] == 0
                self.next_value += 1
                self.content[cell] = self.next_value
                self.seqs[seq].append(self.next_value)
        self.cache.commit_step(plan)

    def verify(self) -> None:
        self.cache.check()
        assert set(self.seqs) == set(self.cache.seq_cells)
        for seq, values in self.seqs.items():
            assert self.content[self.cache.cells_of(seq)].tolist() == values


def check_plan(cache: CellCache, plan, causal: bool = True) -> None:
    """Brute force, token by token: a real token sees cell_table column j iff j < its
    sequence's frontier, and its row's token u iff u is real and (not causal or u <= itself);
    a padding token sees only itself. Window: 0 <= position distance < window."""
    rows, width = plan.positions.shape
    num_cells = plan.cell_table.shape[1]
    assert plan.attn_mask.shape == (rows, 1, width, num_cells + width)
    for s, seq in enumerate(plan.seq_ids.tolist()):
        cells = [] if seq == PAD_SEQ else cache.seq_cells[seq].tolist()
        padding = [cache.scratch_cell] * (num_cells - len(cells))
        assert plan.cell_table[s].tolist() == cells + padding
        for q in range(width):
            real = q < plan.counts[s]
            pos = len(cells) + q if real else 0
            assert plan.positions[s, q] == pos
            keys = [(j, j < len(cells) and real, j) for j in range(num_cells)]
            keys += [(num_cells + u, (u < plan.counts[s] and (not causal or u <= q)) if real
                      else u == q, plan.positions[s, u]) for u in range(width)]
            for column, visible, key_pos in keys:
                assert plan.attn_mask[s, 0, q, column] == visible, (s, q, column)
                if plan.attn_mask_window is not None:
                    near = visible and pos - key_pos < cache.window
                    assert plan.attn_mask_window[s, 0, q, column] == near, (s, q, column)


@pytest.mark.parametrize("window", [0, 3])
@pytest.mark.parametrize("seed, max_cells, max_width",
                         [(seed, 64, 3) for seed in range(6)] + [(6, 1500, 100), (7, 1500, 100)])
def test_random_operations_match_reference(seed, window, max_cells, max_width):
    """Small pools, and pools with steps wide enough that the free cells lie beyond the first
    windows of the free-cell search."""
    rng = np.random.default_rng(seed)
    cache = CellCache(max_cells, window)
    model = Model(cache)
    next_seq = 0
    for _ in range(150):
        op = rng.choice(["new", "rm", "clone", "rewind", "step", "step"])
        live = sorted(model.seqs)
        if op == "new" or not live:
            cache.seq_new(next_seq)
            model.seqs[next_seq] = []
            next_seq += 1
        elif op == "rm":
            seq = int(rng.choice(live))
            cache.seq_rm(seq)
            del model.seqs[seq]
        elif op == "clone":
            src = int(rng.choice(live))
            upto = int(rng.integers(0, len(model.seqs[src]) + 1))
            cache.seq_clone(src, next_seq, upto)
            model.seqs[next_seq] = model.seqs[src][:upto]
            next_seq += 1
        elif op == "rewind":
            seq = int(rng.choice(live))
            pos = int(rng.integers(0, len(model.seqs[seq]) + 1))
            cache.rewind(seq, pos)
            model.seqs[seq] = model.seqs[seq][:pos]
        else:
            chosen = [int(s) for s in rng.choice(live, size=min(3, len(live)), replace=False)]
            width = int(rng.integers(1, max_width + 1))
            counts = [int(rng.integers(1, width + 1)) for _ in chosen]
            pads = int(rng.integers(0, 3))
            if sum(counts) > cache.num_free:
                continue
            model.step(chosen + [PAD_SEQ] * pads, counts + [0] * pads,
                       pad_width=int(rng.integers(0, 2)), pad_cells=int(rng.integers(0, 3)))
        model.verify()
    for seq in list(model.seqs):
        cache.seq_rm(seq)
    cache.check()
    assert cache.num_used == 0


def test_clone_shares_cells_and_rewind_frees_only_unshared():
    cache = CellCache(16)
    model = Model(cache)
    cache.seq_new(0)
    model.seqs[0] = []
    model.step([0], [5])
    assert cache.num_used == 5
    cache.seq_clone(0, 1, 3)
    model.seqs[1] = model.seqs[0][:3]
    assert cache.num_used == 5  # shared, nothing copied
    assert cache.cells_of(1).tolist() == cache.cells_of(0)[:3].tolist()
    model.step([1], [2])
    assert cache.num_used == 7
    cache.rewind(0, 1)  # positions 1, 2 are still seen by seq 1
    model.seqs[0] = model.seqs[0][:1]
    assert cache.num_used == 5
    model.verify()
    cache.seq_rm(1)
    assert cache.num_used == 1
    cache.seq_rm(0)
    assert cache.num_used == 0
    cache.check()


def test_refusals_change_nothing():
    cache = CellCache(8)
    cache.seq_new(0)
    plan = cache.declare_step(np.array([0]), np.array([2]))
    cache.commit_step(plan)
    before = cache.snapshot()
    bad = [
        lambda: cache.seq_new(0),
        lambda: cache.seq_new(-2),
        lambda: cache.seq_rm(5),
        lambda: cache.seq_clone(5, 1, 0),
        lambda: cache.seq_clone(0, 1, 3),
        lambda: cache.seq_clone(0, 0, 1),
        lambda: cache.rewind(0, 3),
        lambda: cache.rewind(0, -1),
        lambda: cache.declare_step(np.array([0, 0]), np.array([1, 1])),  # a sequence twice
        lambda: cache.declare_step(np.array([7]), np.array([1])),  # unknown seq
        lambda: cache.declare_step(np.array([0]), np.array([6])),  # 6 > 5 free cells
        lambda: cache.declare_step(np.array([0]), np.array([0])),  # a row without tokens
        lambda: cache.declare_step(np.array([PAD_SEQ]), np.array([1])),  # padding with tokens
        lambda: cache.declare_step(np.array([0]), np.array([3]), width=2),  # too narrow
        lambda: cache.declare_step(np.array([0]), np.array([1]), num_cells=1),  # reads 2
        lambda: cache.declare_step(np.array([0, 1]), np.array([1, 1]), rows=1),  # 2 rows
        lambda: cache.commit_step(plan),  # stale
    ]
    for call in bad:
        with pytest.raises(InvalidArgument):
            call()
        assert cache.snapshot() == before
    cache.check()


def test_rows_pad_a_step_with_padding_rows():
    """rows=S: the rows given, then PAD_SEQ rows of no tokens, as if passed explicitly."""
    cache = CellCache(8)
    cache.seq_new(0)
    padded = cache.declare_step(np.array([0]), np.array([2]), width=2, rows=3)
    explicit = cache.declare_step(np.array([0, PAD_SEQ, PAD_SEQ]), np.array([2, 0, 0]), width=2)
    assert padded.seq_ids.tolist() == [0, PAD_SEQ, PAD_SEQ]
    assert padded.counts.tolist() == [2, 0, 0]
    for field in ("cells", "positions", "cell_table", "attn_mask"):
        np.testing.assert_array_equal(getattr(padded, field), getattr(explicit, field))


def test_scratch_cell_is_never_handed_out():
    cache = CellCache(4)
    cache.seq_new(0)
    plan = cache.declare_step(np.array([0, PAD_SEQ]), np.array([3, 0]), width=4)
    assert plan.cells.tolist() == [[0, 1, 2, 3], [3, 3, 3, 3]]
    cache.commit_step(plan)
    with pytest.raises(InvalidArgument, match="needs 1 cells, 0 are free"):
        cache.declare_step(np.array([0]), np.array([1]))
    cache.check()


def test_rows_read_only_their_own_cells():
    """Two sequences in one step: each row's table holds its own cells, nothing of the other's
    (the attention of a batch costs what each row reads, not the union)."""
    cache = CellCache(32)
    for seq in (0, 1):
        cache.seq_new(seq)
    cache.commit_step(cache.declare_step(np.array([0, 1]), np.array([5, 2])))
    plan = cache.declare_step(np.array([1, 0]), np.array([1, 1]))
    assert plan.cell_table.tolist() == [[5, 6, 31, 31, 31], [0, 1, 2, 3, 4]]
    assert plan.lengths.tolist() == [2, 5]
    assert plan.positions.tolist() == [[2], [5]]
    assert plan.attn_mask[:, 0, 0].tolist() == [[True, True, False, False, False, True],
                                                [True, True, True, True, True, True]]


def test_block_steps_are_read_only_and_not_causal():
    cache = CellCache(16)
    cache.seq_new(0)
    cache.commit_step(cache.declare_step(np.array([0]), np.array([3])))
    plan = cache.declare_step(np.array([0, PAD_SEQ]), np.array([4, 0]), causal=False,
                              writes=False)
    check_plan(cache, plan, causal=False)
    assert np.all(plan.cells == cache.scratch_cell)
    with pytest.raises(InvalidArgument, match="read-only"):
        cache.commit_step(plan)


def test_a_plan_knows_whether_every_token_is_real():
    """`full` (no padding token) lets commit_step take the cells without a mask; new_cells is
    the cells of the real tokens in row order either way, and the commits agree."""
    cache = CellCache(64)
    for seq in (0, 1):
        cache.seq_new(seq)
    full = cache.declare_step(np.array([0, 1]), [3, 3])
    padded = cache.declare_step(np.array([0, 1]), [3, 1])
    padding_row = cache.declare_step(np.array([0, 1]), [3, 3], rows=3)
    assert (full.full, padded.full, padding_row.full) == (True, False, False)
    assert full.new_cells().tolist() == [0, 1, 2, 3, 4, 5]
    assert padded.new_cells().tolist() == [0, 1, 2, 3]
    assert padding_row.new_cells().tolist() == full.new_cells().tolist()
    cache.commit_step(padded)
    assert cache.cells_of(0).tolist() == [0, 1, 2] and cache.cells_of(1).tolist() == [3]
    cache.commit_step(cache.declare_step(np.array([1, 0]), [2, 2]))
    assert cache.cells_of(1).tolist() == [3, 4, 5] and cache.cells_of(0).tolist() == [0, 1, 2, 6, 7]
    assert cache.cell_pos[[4, 5, 6, 7]].tolist() == [1, 2, 3, 4]
    cache.check()
