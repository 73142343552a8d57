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

    def step(self, seq_ids: list[int]) -> None:
        positions, counter = [], {}
        for seq in seq_ids:
            base = len(self.seqs[seq]) if seq != PAD_SEQ else 0
            positions.append(base + counter.get(seq, 0))
            counter[seq] = counter.get(seq, 0) + 1
        plan = self.cache.declare_step(np.array(seq_ids), np.array(positions))
        check_bias(self.cache, plan)
        for seq, cell in zip(seq_ids, plan.cells):
            self.next_value += 1
            if seq == PAD_SEQ:
                assert cell == self.cache.scratch_cell
                continue
            assert self.content[cell] == -1 or self.cache.cell_refs[cell] == 0
            self.content[cell] = self.next_value
            self.seqs[seq].append(self.next_value)
        self.cache.commit_step(plan)

    def verify(self) -> None:
        self.cache.check()
        assert set(self.seqs) == set(self.cache.seq_cells)
        for seq, values in self.seqs.items():
            assert self.content[self.cache.cells_of(seq)].tolist() == values


def check_bias(cache: CellCache, plan) -> None:
    """Brute force: token t sees read cell c iff its sequence sees c; step token u iff same
    sequence and not later; padding sees only itself. Window: position distance < window."""
    n = plan.cells_read.size
    for t, (seq, pos) in enumerate(zip(plan.seq_ids, plan.positions)):
        seen = set() if seq == PAD_SEQ else set(cache.seq_cells[int(seq)].tolist())
        for j, cell in enumerate(plan.cells_read):
            expect = cell in seen
            assert (plan.attn_bias[t, j] == 0) == expect
            if plan.attn_bias_window is not None:
                near = expect and pos - cache.cell_pos[cell] < cache.window
                assert (plan.attn_bias_window[t, j] == 0) == near
        for u, (other, upos) in enumerate(zip(plan.seq_ids, plan.positions)):
            expect = (u == t) if seq == PAD_SEQ else (other == seq and upos <= pos)
            assert (plan.attn_bias[t, n + u] == 0) == expect
            if plan.attn_bias_window is not None:
                near = expect and pos - upos < cache.window
                assert (plan.attn_bias_window[t, n + u] == 0) == near
    assert np.all(np.isin(plan.attn_bias, [0, -np.inf]))


@pytest.mark.parametrize("window", [0, 3])
@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_reference(seed, window):
    rng = np.random.default_rng(seed)
    cache = CellCache(64, window)
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
            chosen = rng.choice(live, size=min(3, len(live)), replace=False)
            seq_ids = [int(s) for s in chosen for _ in range(int(rng.integers(1, 4)))]
            seq_ids += [PAD_SEQ] * int(rng.integers(0, 3))
            if len(seq_ids) - seq_ids.count(PAD_SEQ) > cache.num_free:
                continue
            model.step(seq_ids)
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
    model.step([0, 0, 0, 0, 0])
    assert cache.num_used == 5
    cache.seq_clone(0, 1, 3)
    model.seqs[1] = model.seqs[0][:3]
    assert cache.num_used == 5  # shared, nothing copied
    assert cache.cells_of(1).tolist() == cache.cells_of(0)[:3].tolist()
    model.step([1, 1])
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
    plan = cache.declare_step(np.array([0, 0]), np.array([0, 1]))
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
        lambda: cache.declare_step(np.array([0]), np.array([1])),  # does not continue
        lambda: cache.declare_step(np.array([7]), np.array([0])),  # unknown seq
        lambda: cache.declare_step(np.array([0] * 6), np.arange(2, 8)),  # 6 > 5 free cells
        lambda: cache.commit_step(plan),  # stale
    ]
    for call in bad:
        with pytest.raises(InvalidArgument):
            call()
        assert cache.snapshot() == before
    cache.check()


def test_scratch_cell_is_never_handed_out():
    cache = CellCache(4)
    cache.seq_new(0)
    plan = cache.declare_step(np.array([0, 0, 0, PAD_SEQ]), np.array([0, 1, 2, 0]))
    assert plan.cells.tolist() == [0, 1, 2, 3]
    cache.commit_step(plan)
    with pytest.raises(InvalidArgument, match="needs 1 cells, 0 are free"):
        cache.declare_step(np.array([0]), np.array([3]))
    cache.check()
