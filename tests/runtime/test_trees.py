"""Trees of draft proposals (runtime/trees.py): grown best first from the draft block's top
choices, verified in one target step whose rows see only their ancestors, walked by the
target's draws, the accepted path kept in the cell cache. The text is plain decoding's."""

import dataclasses
import itertools

import numpy as np
import pytest

from cellspec import artifact as names
from cellspec.errors import InvalidArgument
from cellspec.runtime import dflash
from cellspec.runtime.cell_cache import CellCache
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.draft import ProposalRequest
from cellspec.runtime.executor import Executor
from cellspec.runtime.target import tree_feeds
from cellspec.runtime.trees import (
    DraftTree,
    ancestor_mask,
    depths_of,
    grow_tree,
    tree_capacity,
    walk,
)
from cellspec.runtime.types import BatchInput
from tests.conftest import draft_calls

from .test_decode_chain import queued_backend
from .test_dflash_oracle import spec_decode
from .test_executor import GREEDY, SAMPLED, prompts, run_alone
from .test_ort_device import host_backend


def best_prefixes(logp: np.ndarray, nodes: int) -> set[tuple[int, ...]]:
    """Every path of choices (one per depth, up to n) scored by its summed logp; the `nodes`
    best (no ties in the tests' random values)."""
    depth_limit, branches = logp.shape
    paths = [p for d in range(1, depth_limit + 1)
             for p in itertools.product(range(branches), repeat=d)]
    paths.sort(key=lambda p: -sum(logp[d, c] for d, c in enumerate(p)))
    return set(paths[:nodes])


def choices_of(tree: DraftTree, ids: np.ndarray) -> set[tuple[int, ...]]:
    """Each node's path as choice indices, read back from its tokens and its ancestors'."""
    paths = {0: ()}
    for row in range(1, tree.rows):
        depth = tree.depths[row]
        choice = int(np.flatnonzero(ids[depth - 1] == tree.tokens[row - 1])[0])
        paths[row] = paths[int(tree.parents[row])] + (choice,)
    return {p for row, p in paths.items() if row}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("nodes", [1, 3, 7, 15])
def test_a_tree_is_the_most_probable_prefixes_parents_first(seed, nodes):
    rng = np.random.default_rng(seed)
    depth_limit = int(rng.integers(2, 6))
    logits = rng.normal(size=(depth_limit, 40)) * 2
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    order = np.argsort(-logp, axis=1)[:, :4]
    ids, top = order + 1000, np.take_along_axis(logp, order, axis=1)
    tree = grow_tree(ids, top.astype(np.float32), nodes)
    assert tree.rows == nodes + 1
    assert tree.parents[0] == -1 and all(tree.parents[1:] < np.arange(1, tree.rows))
    assert np.array_equal(tree.depths, depths_of(tree.parents))
    assert choices_of(tree, ids) == best_prefixes(top.astype(np.float32), nodes)


@pytest.mark.parametrize("choices", [1, 2, 3])
def test_a_tree_of_the_first_choices_is_their_most_probable_prefixes(choices):
    """grow_tree(..., choices=c): the best prefixes over each row's first c choices only, as
    many as those hold where that is fewer than asked (tree_capacity)."""
    rng = np.random.default_rng(choices)
    logits = rng.normal(size=(4, 40)) * 2
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    order = np.argsort(-logp, axis=1)[:, :4]
    ids, top = order + 1000, np.take_along_axis(logp, order, axis=1).astype(np.float32)
    for nodes in (3, 15, 40):
        tree = grow_tree(ids, top, nodes, choices)
        held = min(nodes, tree_capacity(choices, 4))
        assert tree.rows == held + 1
        assert choices_of(tree, ids) == best_prefixes(top[:, :choices], held)
    assert tree_capacity(1, 4) == 4 and tree_capacity(2, 4) == 30 and tree_capacity(4, 2) == 20


def test_a_tree_of_first_choices_only_is_a_chain():
    ids = np.array([[5, 6], [7, 8], [9, 10]])
    logp = np.log(np.array([[0.99, 0.01], [0.98, 0.02], [0.97, 0.03]]))
    tree = grow_tree(ids, logp, 3)
    assert tree.tokens.tolist() == [5, 7, 9]  # each node the child of the one before
    assert tree.parents.tolist() == [-1, 0, 1, 2]
    assert tree.depths.tolist() == [0, 1, 2, 3]


def test_grow_tree_refuses_bad_shapes():
    with pytest.raises(InvalidArgument, match="expected the same"):
        grow_tree(np.zeros((3, 4), np.int64), np.zeros((3, 2)), 4)
    with pytest.raises(InvalidArgument, match="at least 1"):
        grow_tree(np.zeros((3, 4), np.int64), np.zeros((3, 4)), 0)
    for choices in (0, 5):
        with pytest.raises(InvalidArgument, match=f"{choices} choices of a row of 4"):
            grow_tree(np.zeros((3, 4), np.int64), np.zeros((3, 4)), 4, choices)


def test_ancestor_mask_and_depths():
    parents = np.array([-1, 0, 0, 1, 2, 3])
    expected = np.array([[1, 0, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0, 0],
                         [1, 0, 1, 0, 0, 0],
                         [1, 1, 0, 1, 0, 0],
                         [1, 0, 1, 0, 1, 0],
                         [1, 1, 0, 1, 0, 1]], dtype=bool)
    assert np.array_equal(ancestor_mask(parents), expected)
    assert depths_of(parents).tolist() == [0, 1, 1, 2, 2, 3]


def test_walk_follows_the_draws_through_any_branch():
    # anchor; 1: 10 and 2: 11 under it; 3: 12 under 1; 4: 13 under 2; 5: 14 under 3
    tree = DraftTree(np.array([10, 11, 12, 13, 14]), np.array([-1, 0, 0, 1, 2, 3]),
                     np.array([0, 1, 1, 2, 2, 3]))
    # the draw after the anchor is 11 (second branch), after it 13, then 99 (no child)
    assert walk(tree, np.array([11, 0, 13, 0, 99, 0])) == ([0, 2, 4], (11, 13, 99))
    assert walk(tree, np.array([10, 12, 0, 14, 0, 7])) == ([0, 1, 3, 5], (10, 12, 14, 7))
    assert walk(tree, np.array([42, 12, 13, 14, 0, 0])) == ([0], (42,))
    assert tree.main_path() == [0, 1, 3, 5]  # each row's first (best) child


def test_tree_feeds_place_rows_by_depth_and_show_only_ancestors():
    cache = CellCache(32)
    cache.seq_new(0)
    cache.commit_step(cache.declare_step([0], [3]))
    plan = cache.declare_step([0], [5], width=6, num_cells=4, rows=2)
    positions, mask = tree_feeds(plan, np.array([[-1, 0, 0, 1, 2]]))
    assert positions.tolist() == [[3, 4, 4, 5, 5, 0], [0] * 6]
    assert np.array_equal(plan.positions[0], [3, 4, 5, 6, 7, 0])  # the plan keeps its own
    cells = mask[0, 0, :5, :4]
    assert np.array_equal(cells, np.repeat([[True, True, True, False]], 5, axis=0))
    own = mask[0, 0, :5, 4:9]
    assert np.array_equal(own, ancestor_mask(np.array([-1, 0, 0, 1, 2])))
    # padding keeps what the plan gave it
    assert np.array_equal(mask[0, 0, 5], plan.attn_mask[0, 0, 5])
    assert np.array_equal(mask[1], plan.attn_mask[1])


def test_keep_path_moves_the_path_to_consecutive_positions_and_frees_the_rest():
    cache = CellCache(32)
    cache.seq_new(0)
    cache.seq_new(1)
    cache.commit_step(cache.declare_step([0, 1], [3, 2]))  # cells 0-2 and 3-4
    cache.commit_step(cache.declare_step([0], [6]))  # a tree's 6 rows: cells 5-10
    cache.keep_path(0, 3, [0, 2, 5])
    assert cache.cells_of(0).tolist() == [0, 1, 2, 5, 7, 10]
    assert cache.cell_pos[[5, 7, 10]].tolist() == [3, 4, 5]
    assert cache.cell_refs[[6, 8, 9]].tolist() == [0, 0, 0]
    cache.check()
    assert cache.num_used == 8
    # the next step takes the lowest freed cells
    plan = cache.declare_step([1], [2])
    assert plan.cells.tolist() == [[6, 8]]


def test_keep_path_refusals_change_nothing():
    cache = CellCache(32)
    cache.seq_new(0)
    cache.commit_step(cache.declare_step([0], [6]))
    cache.seq_clone(0, 1, 6)
    before = cache.snapshot()
    for start, keep, match in [(7, [0], "outside"), (2, [1, 1], "increasing"),
                               (2, [0, 4], "increasing"), (2, [-1], "increasing"),
                               (2, [0, 2], "shared")]:
        with pytest.raises(InvalidArgument, match=match):
            cache.keep_path(0, start, keep)
        assert cache.snapshot() == before
    with pytest.raises(InvalidArgument, match="no such sequence"):
        cache.keep_path(5, 0, [0])
    cache.keep_path(0, 2, [0, 1])  # nothing moves: shared cells may stay
    assert cache.cells_of(0).tolist() == [0, 1, 2, 3]
    cache.check()


def test_a_verify_planned_before_keep_path_is_rebased_after_it():
    """The next verify planned while a tree's rows are all in the cache takes other cells; once
    keep_path kept the path, its plan rebased commits those cells right after the path, and
    the plan as made is refused (an older version). Refused: a read-only plan, a plan whose
    cells another step took since; neither changes the cache."""
    cache = CellCache(32)
    cache.seq_new(0)
    cache.seq_new(1)
    cache.commit_step(cache.declare_step([0, 1], [3, 2]))  # cells 0-2 and 3-4
    cache.commit_step(cache.declare_step([0], [6]))  # a tree's 6 rows: cells 5-10
    plan = cache.declare_step([0], [4])  # the next verify's rows, before the walk
    assert plan.cells.tolist() == [[11, 12, 13, 14]] and plan.positions.tolist() == [[9, 10, 11,
                                                                                        12]]
    cache.keep_path(0, 3, [0, 2])
    with pytest.raises(InvalidArgument, match="version"):
        cache.commit_step(plan)
    rebased = cache.rebase_step(plan)
    assert rebased.positions.tolist() == [[5, 6, 7, 8]] and rebased.version == cache.version
    np.testing.assert_array_equal(rebased.cell_table, plan.cell_table)  # what the run read
    cache.commit_step(rebased)
    assert cache.cells_of(0).tolist() == [0, 1, 2, 5, 7, 11, 12, 13, 14]
    assert cache.cell_pos[[11, 12, 13, 14]].tolist() == [5, 6, 7, 8]
    cache.check()
    # refusals
    late = cache.declare_step([1], [2])  # cells 6, 8 (freed by keep_path)
    cache.commit_step(cache.declare_step([0], [2]))  # takes them first
    before = cache.snapshot()
    with pytest.raises(InvalidArgument, match="taken"):
        cache.rebase_step(late)
    read_only = cache.declare_step([1], [2], writes=False)
    with pytest.raises(InvalidArgument, match="read-only"):
        cache.rebase_step(read_only)
    assert cache.snapshot() == before


def random_tree(rng: np.random.Generator, nodes: int) -> DraftTree:
    """A tree of `nodes` grown from 8 block rows of random choices (ids below 1000)."""
    ids = np.stack([rng.choice(1000, names.TOP_K, replace=False) for _ in range(8)])
    logp = -np.sort(rng.uniform(0, 3, ids.shape), axis=1).astype(np.float32)
    return grow_tree(ids, logp, nodes)


def walk_case(seed: int, owners: int = 3, nodes: int = 15, block: int = 16, cells: int = 128,
              stride: int = 16) -> dict:
    """A draft cache whose `owners` sequences each hold a verified tree's rows (drained, in row
    order) after a prefix, and what the device's walk_trees takes: each tree's record (as
    grow_trees writes it), the verify's draws along a random path of it (at `stride` a row),
    and the next block's feeds as DraftModel.queue_choices(walk=) stages them (one padding row)."""
    rng = np.random.default_rng(seed)
    cache, rows = CellCache(1024), nodes + 1
    bases = rng.integers(3, cells - rows, owners)
    for seq in range(owners):
        cache.seq_new(seq)
    for _ in range(3):  # prefixes in turns: a sequence's cells are not consecutive
        for seq, base in enumerate(bases):
            count = int(base) // 3 + (_ == 2) * (int(base) % 3)
            cache.commit_step(cache.declare_step(np.array([seq]), [count]))
    seqs = np.arange(owners)
    cache.commit_step(cache.declare_step(seqs, [rows] * owners))  # the trees' rows
    trees, paths = [], []
    drawn = rng.integers(1000, 2000, (owners, stride)).astype(np.int64)  # matching no node
    for o in range(owners):
        tree = random_tree(rng, nodes)
        path, row = [0], 0
        while (children := np.flatnonzero(tree.parents == row)).size and rng.random() < 0.9:
            child = int(rng.choice(children))
            drawn[o, row] = tree.tokens[child - 1]
            path.append(child)
            row = child
        trees.append(tree)
        paths.append(path)
    anchors = rng.integers(0, 1000, owners)
    record = np.stack([np.stack([np.concatenate([[a], t.tokens]), t.parents, t.depths])
                       for a, t in zip(anchors, trees)]).astype(np.int64)
    plan = cache.declare_step(seqs, [block] * owners, block, cells, causal=False, writes=False,
                              rows=owners + 1)
    tokens = np.full((owners + 1, block), 7, np.int64)
    tokens[:owners, 0] = anchors
    positions = plan.positions.copy()
    positions[:owners] = bases[:, None]
    return {"cache": cache, "bases": bases, "trees": trees, "paths": paths, "drawn": drawn,
            "record": record, "tokens": tokens, "positions": positions,
            "cell_table": plan.cell_table.copy(), "mask": plan.attn_mask.copy(),
            "block": block, "cells": cells, "stride": stride, "rows": rows}


def device_walk(device, case: dict) -> dict:
    """`device`'s walk_trees on the case's arrays: the feeds it leaves and its out [O, 2]."""
    owners = len(case["trees"])
    names_ = ["drawn", "record", "tokens", "positions", "cell_table", "mask"]
    arrays = [case[n] for n in names_] + [np.full((owners, 2), -7, np.int64)]
    buffers = [device.alloc(a.nbytes) for a in arrays]
    for buffer, array in zip(buffers, arrays):
        device.upload(buffer, array)
    device.synchronize()
    device.walk_trees(buffers[0].ptr, case["stride"], buffers[1].ptr, owners, case["rows"],
                      *(b.ptr for b in buffers[2:6]), case["block"], case["cells"],
                      buffers[6].ptr)
    device.synchronize()
    out = {}
    for name, array, buffer in zip([*names_, "out"], arrays, buffers):
        out[name] = np.empty_like(array)
        device.download(out[name], buffer)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_walk_on_the_device_stages_the_block_the_host_would_after_its_walk(seed):
    """HostDevice.walk_trees (CudaDevice's reference) on a block staged before the verdict:
    its feeds equal those of the block staged after the host's walk and keep_path (the
    positions, the mask, the anchor, the cell table up to the accepted path's end), and its
    out gives each path's length and next token."""
    from cellspec.runtime.device import HostDevice

    case = walk_case(seed)
    got = device_walk(HostDevice(), case)
    cache, owners = case["cache"], len(case["trees"])
    bursts = []
    for o, (tree, base) in enumerate(zip(case["trees"], case["bases"].tolist())):
        path, burst = walk(tree, case["drawn"][o])
        assert path == case["paths"][o]
        cache.keep_path(o, base, path)
        bursts.append(burst)
    plan = cache.declare_step(np.arange(owners), [case["block"]] * owners, case["block"],
                              case["cells"], causal=False, writes=False, rows=owners + 1)
    assert max(len(p) for p in case["paths"]) >= 2  # paths through the trees were walked
    np.testing.assert_array_equal(got["positions"], plan.positions)
    np.testing.assert_array_equal(got["mask"], plan.attn_mask)
    expected_tokens = case["tokens"].copy()
    expected_tokens[:owners, 0] = [b[-1] for b in bursts]
    np.testing.assert_array_equal(got["tokens"], expected_tokens)
    for o in range(owners):
        end = cache.pos(o)
        assert end == case["bases"][o] + len(case["paths"][o])
        np.testing.assert_array_equal(got["cell_table"][o, :end], plan.cell_table[o, :end])
    np.testing.assert_array_equal(got["cell_table"][owners:], case["cell_table"][owners:])
    np.testing.assert_array_equal(got["out"], [[len(p), b[-1]]
                                               for p, b in zip(case["paths"], bursts)])
    np.testing.assert_array_equal(got["drawn"], case["drawn"])
    np.testing.assert_array_equal(got["record"], case["record"])


def uniforms_case(seed: int, walked: bool, owners: int = 3, nodes: int = 15,
                  stride: int = 20) -> dict:
    """Grown trees' record (as grow_trees writes it), a sampler's params [R, 4] (owner o's rows
    at o * stride, two rows past the last owner's), each owner's uniforms of the positions
    after its anchor (as far as DFlashExecutor._launch_grown stages them for 15 proposals) and,
    `walked`, a walk's out [owners, 2] (each path's length, its next token)."""
    rng = np.random.default_rng(seed)
    rows = nodes + 1
    record = np.zeros((owners, 3, rows), np.int64)
    for o in range(owners):
        tree = random_tree(rng, nodes)
        record[o] = [[7, *tree.tokens], tree.parents, tree.depths]
    longest = min(nodes, 15) + 1
    out = np.stack([rng.integers(1, longest + 1, owners), rng.integers(0, 99, owners)], axis=1)
    return {"record": record, "rows": rows, "stride": stride,
            "params": rng.uniform(0, 1, (owners * stride + 2, 4)).astype(np.float32),
            "chain": rng.uniform(0, 1, (owners, rows + longest)).astype(np.float32),
            "walked": out.astype(np.int64) if walked else None}


def device_uniforms(device, case: dict) -> np.ndarray:
    """`device`'s tree_uniforms on the case's arrays: the params it leaves."""
    given = [n for n in ("record", "params", "chain", "walked") if case[n] is not None]
    buffers = {n: device.alloc(case[n].nbytes) for n in given}
    for name, buffer in buffers.items():
        device.upload(buffer, case[name])
    device.synchronize()
    owners, span = case["chain"].shape
    device.tree_uniforms(buffers["params"].ptr, buffers["record"].ptr, buffers["chain"].ptr,
                         span, buffers["walked"].ptr if "walked" in buffers else 0, owners,
                         case["rows"], case["stride"])
    device.synchronize()
    out = np.empty_like(case["params"])
    device.download(out, buffers["params"])
    return out


@pytest.mark.parametrize("walked", [False, True], ids=["grown", "walked"])
@pytest.mark.parametrize("seed", range(3))
def test_a_sampled_tree_row_takes_the_uniform_of_its_position(seed, walked):
    """HostDevice.tree_uniforms (CudaDevice's reference): each tree row's uniform in the
    sampler's params becomes that of its position, its depth after the anchor (past the path
    a walk accepted, where it walked), from its owner's uniforms of the positions after the
    anchor, as the host stages a tree's draws (DFlashExecutor._tree_verify); the other columns
    and rows stay."""
    from cellspec.runtime.device import HostDevice

    case = uniforms_case(seed, walked)
    got, stride = device_uniforms(HostDevice(), case), case["stride"]
    expected = case["params"].copy()
    for o, depths in enumerate(case["record"][:, 2]):
        past = case["walked"][o, 0] if walked else 0
        expected[o * stride + np.arange(depths.size), 3] = case["chain"][o, past + depths]
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, case["params"])


def test_draft_choices_are_the_blocks_best_ids_and_log_softmax(dflash_artifact):
    # ort-cpu loads draft_block without them (it verifies chains only): see below
    assert not DFlashExecutor.load(dflash_artifact, max_sessions=2).draft.has_choices
    spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                               max_sessions=4)
    assert spec.draft.has_choices
    sids = [spec.open_session() for _ in range(2)]
    for sid in sids:
        spec.set_sampling(sid, GREEDY)
    outs = spec.execute([BatchInput(s, tuple(p), 0)
                         for s, p in zip(sids, prompts(2, seed=3))])
    spec._drain(sids)
    requests = [ProposalRequest(o.sid, o.token, spec.pos(o.sid)) for o in outs]
    fetched, run = [], spec.draft._run

    def with_logits(engine, method, count, feeds, outputs, **kwargs):
        out = run(engine, method, count, feeds, [*outputs, names.LOGITS], **kwargs)
        fetched.append(out[names.LOGITS])
        return out

    spec.draft._run = with_logits
    ids, logp = spec.draft.propose_choices(requests, 3)
    assert ids.shape == logp.shape == (2, 3, names.TOP_K)
    logits = fetched[0][:6].astype(np.float64).reshape(2, 3, -1)
    expected = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    best = np.argsort(-logits, axis=-1, kind="stable")[..., : names.TOP_K]
    assert np.array_equal(ids, best)  # no proposal vocabulary: ids are columns
    np.testing.assert_allclose(logp, np.take_along_axis(expected, best, -1), atol=1e-5)
    proposals = spec.draft.propose(requests, 3)
    assert np.array_equal(ids[..., 0], proposals)


def tree_backend(artifact):
    """The IOBinding backend on the CPU with the exported attention over [cells ; new tokens]
    under the step's mask, told it may verify trees. The exported form rounds a verify row
    within about 1e-6 of the plain step (not bit for bit: on the GPU only CellAttention keys
    every new token by its position); the tiny model's tokens are far from such ties, as the
    chain tests over this backend rely on too (test_ort_device)."""
    backend = host_backend(artifact, 4)
    backend.exact_trees = True
    return backend


def plain_on_tree_backend(artifact):
    """Plain decoding over the same backend and attention form (ort-cpu's by-position form
    rounds otherwise, and a sampled draw near a boundary can tell them apart)."""
    return Executor.load(artifact, backend=host_backend(artifact, 4), max_sessions=4)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("count", [1, 3])
def test_tree_speculation_equals_plain_decoding(dflash_artifact, sampling, count):
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(count, seed=5)
    expected = [run_alone(plain, p, sampling, seed=7 + i, steps=24) for i, p in enumerate(texts)]
    spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                               max_sessions=4, tree_nodes=7)
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, 7 + i)
    assert spec_decode(spec, sids, texts, 20) == [e[:20] for e in expected]
    assert spec.stats.cycles > 0 and spec.stats.proposed == 7 * spec.stats.cycles
    for sid in sids:
        spec.close_session(sid)
    assert spec.cache.num_used == 0 and spec.draft.cache.num_used == 0
    spec.draft.cache.check()


def queued_tree_backend(artifact):
    """tree_backend over test_decode_chain's QueuedDevice: nothing is done until waited for,
    as on a stream, so a result read before its copy ran would be stale."""
    backend = queued_backend(artifact, 4)
    backend.exact_trees = True
    return backend


@pytest.mark.parametrize("make", [tree_backend, queued_tree_backend], ids=["host", "queued"])
def test_trees_narrowed_by_max_verify_rows_walk_on_the_device_and_equal_plain(dflash_artifact,
                                                                               make):
    """With max_verify_rows (as LLM sets it on ort-cuda with trees), a cycle of 3 sessions
    verifies trees of 10 // 3 - 1 = 2 nodes each; greedy, the prefill queues the first cycle's
    block and verify, each cycle the next block and verify before its verdict (walked on the
    device), and the text is plain decoding's."""
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(3, seed=23)
    expected = [run_alone(plain, p, GREEDY, seed=7 + i, steps=24) for i, p in enumerate(texts)]
    spec = DFlashExecutor.load(dflash_artifact, backend=make(dflash_artifact), max_sessions=4,
                               tree_nodes=7, max_verify_rows=10)
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, GREEDY, 7 + i)
    assert spec_decode(spec, sids, texts, 20) == [e[:20] for e in expected]
    assert spec.stats.proposed == 2 * spec.stats.cycles > 0
    assert spec.stats.walked == spec.stats.grown == spec.stats.rounds > 0


@pytest.mark.parametrize("make", [tree_backend, queued_tree_backend], ids=["host", "queued"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_trees_of_first_choices_are_chains_queued_as_trees(dflash_artifact, sampling, make,
                                                           monkeypatch):
    """tree_choices=1: every cycle's tree is the chain of the block's first choices (each row
    the child of the row before), grown on the device and queued at the verdict as trees are;
    the text is plain decoding's."""
    from cellspec.runtime import trees as trees_module

    grown = []
    original = trees_module.grow_tree

    def recording(ids, logp, nodes, choices=None):  # the choices of a row it grew from
        tree = original(ids, logp, nodes, choices)
        grown.append((ids.shape[1] if choices is None else choices, tree))
        return tree

    monkeypatch.setattr(trees_module, "grow_tree", recording)  # the device's (HostDevice)
    monkeypatch.setattr(dflash, "grow_tree", recording)  # the host's
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(3, seed=31)
    expected = [run_alone(plain, p, sampling, seed=7 + i, steps=24) for i, p in enumerate(texts)]
    spec = DFlashExecutor.load(dflash_artifact, backend=make(dflash_artifact), max_sessions=4,
                               tree_nodes=4, tree_choices=1)  # the draft's n_draft: 4
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, 7 + i)
    assert spec_decode(spec, sids, texts, 20) == [e[:20] for e in expected]
    assert spec.stats.proposed == 4 * spec.stats.cycles > 0
    assert spec.stats.grown > 0  # grown on the device, queued at a verdict
    assert len(grown) >= spec.stats.cycles
    for choices, tree in grown:
        assert choices == 1
        assert tree.parents.tolist() == list(range(-1, 4))
        assert tree.depths.tolist() == list(range(5))


def open_prefilled(spec, texts, sampling):
    """A session per prompt (seeds 5, 6, ...), prefilled in one call: their sids and each
    one's tokens so far (the first drawn)."""
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, 5 + i)
    outs = spec.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, texts)])
    return sids, {o.sid: [o.token] for o in outs}


@pytest.mark.parametrize("make", [tree_backend, queued_tree_backend], ids=["host", "queued"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("count", [1, 3])
def test_the_next_draft_block_is_queued_at_the_verdict(dflash_artifact, sampling, count, make):
    """A tree cycle queues the next cycle's draft block of its sessions as soon as its verdict
    is in; the next cycle takes those choices, which equal a block run then, unless the draft
    changed in between (a session opened: its cache's version moved; another block ran: the
    outputs are that run's) or the cycle is of other sessions: then it runs its own. The text
    is plain decoding's, also where the device runs its work only when waited for."""
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(count, seed=12)
    expected = [run_alone(plain, p, sampling, seed=5 + i, steps=30) for i, p in enumerate(texts)]
    spec = DFlashExecutor.load(dflash_artifact, backend=make(dflash_artifact),
                               max_sessions=4, tree_nodes=7)
    spec.verify_ahead = False  # the block alone (the verify queued with it: the next test)
    taken, choices = [], spec._choices

    def recording_choices(requests):
        ahead = spec._ahead
        got = choices(requests)
        fresh = spec.draft.propose_choices(requests, spec.n_draft)  # the block run now
        taken.append(ahead is not None and ahead[0] == requests)
        for a, b in zip(got, fresh):
            np.testing.assert_array_equal(a, b)
        return got

    spec._choices = recording_choices
    sids, history = open_prefilled(spec, texts, sampling)
    blocks = lambda: draft_calls(spec.draft.stats, "draft_block", "ahead")  # noqa: E731
    cycle = 0
    while min(len(h) for h in history.values()) < 26:
        if cycle == 3:  # the draft's cache changes: the queued block is not taken
            spec.close_session(spec.open_session())
        if cycle == 5:  # another run of the block: its outputs are not the queued one's
            spec.draft.propose_choices(spec._ahead[0], spec.n_draft)
        live = sids if cycle != 7 or count == 1 else sids[1:]  # other sessions: not taken
        before = blocks()
        for out in spec.execute([BatchInput(s, (history[s][-1],), spec.pos(s)) for s in live]):
            history[out.sid] += out.tokens
        # not taken: the first cycle, the two changes, and with several sessions the cycle
        # of fewer and the one after it (queued for fewer)
        unmatched = {0, 7, 8} if count > 1 else {0}
        assert blocks() - before == (0 if cycle in unmatched | {3, 5} else 1), cycle
        cycle += 1
    assert [history[s][:26] for s in sids] == [e[:26] for e in expected]
    # queued at every verdict: each cycle of the same sessions found its block queued
    assert [i for i, t in enumerate(taken) if not t] == sorted(unmatched)


def drive_verifies_ahead(spec, texts, sampling, switch):
    """Tree cycles of every session, with the changes test_the_next_verify_... describes;
    returns each session's tokens, whether each cycle took the verify queued at the last
    verdict (None: the cycle was a plain step), the target's runs in each cycle, and each
    session's tokens before the switch of sampling."""
    taken, take = [], spec._verify_taken

    def recording(requests, nodes):
        got = take(requests, nodes)
        taken.append(got is not None)
        return got

    spec._verify_taken = recording
    sids, history = open_prefilled(spec, texts, sampling)
    runs, cycles = [], []
    cycle = 0
    while min(len(h) for h in history.values()) < 30:
        if cycle == 3:  # the target's cache changes (a session opened and closed)
            spec.close_session(spec.open_session())
        if cycle == 5:  # so does it at a rewind, even to where the session is
            spec.rewind(sids[0], spec.pos(sids[0]))
        if cycle == 9:  # a session's sampling changes: the draws queued are not its own
            spec.set_sampling(sids[0], switch, 11)
            switched = [len(history[s]) for s in sids]
        live = sids if cycle != 7 or len(sids) == 1 else sids[1:]  # other sessions
        before, calls = spec.target.engine.runs, len(taken)
        for out in spec.execute([BatchInput(s, (history[s][-1],), spec.pos(s)) for s in live]):
            history[out.sid] += out.tokens
        runs.append(spec.target.engine.runs - before)
        cycles.append(taken[calls] if len(taken) > calls else None)  # None: a plain step
        cycle += 1
    return [history[s][:30] for s in sids], cycles, runs, switched


@pytest.mark.parametrize("make", [tree_backend, queued_tree_backend], ids=["host", "queued"])
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("count", [1, 3])
def test_the_next_verify_is_queued_at_the_verdict(dflash_artifact, sampling, count, make,
                                                  monkeypatch):
    """A tree cycle also queues the next cycle's verify at its verdict, uncommitted; the next
    cycle finishes it instead of running its own unless something changed in between: the
    target's cache (a session opened and closed; a rewind), a session's sampling, or the
    sessions of the cycle. The text equals that of cycles that each run their own verify,
    which equals plain decoding's up to the sampling switch, also where the device runs its
    work only when waited for. The trees grow on the device (`grow_on_device`), into the
    verify's staged inputs, a sampled row taking its position's uniform there: the same trees
    and draws as grown on the host. A cycle that finishes such a verify queues the next block
    and verify behind it before its verdict, walked on the device (`walk_on_device`): the same
    trees, draws and verifies taken as where they are queued after the host's walk."""
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(count, seed=14)
    switch = GREEDY if sampling == SAMPLED else SAMPLED
    results, walks, grown, walked = {}, {}, {}, {}
    # (verify_ahead, grow_on_device, walk_on_device)
    settings = ((True, True, True), (True, True, False), (True, False, False),
                (False, False, False))
    for setting in settings:
        spec = DFlashExecutor.load(dflash_artifact, backend=make(dflash_artifact),
                                   max_sessions=4, tree_nodes=7)
        spec.verify_ahead, spec.grow_on_device, spec.walk_on_device = setting
        walks[setting] = recorded = []

        def recording_walk(tree, drawn, recorded=recorded):
            recorded.append((tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist(),
                             drawn.tolist()))
            return walk(tree, drawn)

        monkeypatch.setattr(dflash, "walk", recording_walk)
        results[setting] = drive_verifies_ahead(spec, texts, sampling, switch)
        grown[setting] = spec.stats.grown
        walked[setting] = draft_calls(spec.draft.stats, suffix=" past verdict")
        assert spec.stats.walked == walked[setting]  # each with the next verify
    default, host_walk, host_trees, own = settings
    (tokens, taken, runs, switched), (own_tokens, own_taken, own_runs, _) = \
        results[default], results[own]
    assert tokens == own_tokens == results[host_trees][0] == results[host_walk][0]
    # grown on the device (the greedy sessions' cycles that took their queued verify) or on
    # the host, each cycle verified the same trees and drew the same tokens
    assert walks[default] == walks[host_walk] == walks[host_trees] == walks[own]
    # the device's walks were the host's: no verify grown from a block queued before its
    # verdict was dropped
    assert taken == results[host_walk][1] and runs == results[host_walk][2]
    # every taken verify grew its trees on the device, greedy or sampled
    assert grown[default] == grown[host_walk] == sum(t is True for t in taken) > 0
    assert grown[host_trees] == grown[own] == 0
    # each cycle that took a verify grown on the device queued the next block and verify
    # before its verdict
    assert walked[default] == grown[default]
    assert walked[host_walk] == walked[host_trees] == walked[own] == 0
    # not taken: the changes, and with several sessions the cycle of fewer and the one after
    # it (queued for fewer). The first cycle takes the verify its prefill queued. A rewind
    # leaves no pending token: alone, the session's next cycle is a plain step (None), which
    # queues the cycle after it, as a prefill does; with others, its plain step and their
    # cycle share a call, which queues nothing for the next
    if count == 1:
        unmatched, plain_steps = {3, 9}, [5]
    else:
        unmatched, plain_steps = {3, 5, 6, 7, 8, 9}, []
    assert [i for i, t in enumerate(taken) if t is False] == sorted(unmatched)
    assert [i for i, t in enumerate(taken) if t is None] == plain_steps
    assert set(own_taken[:5]) == {False}
    # a cycle that takes the queued verify runs the target once (the next cycle's verify),
    # one that does not runs it twice (its own, then the next one's), a plain step once more;
    # a plain step alone runs it twice (its own, then the next cycle's verify)
    mixed = 5 if count > 1 else None  # the cycle with a plain step beside it
    assert runs == [2 if t is None else (1 if t else 2) + (i == mixed)
                    for i, t in enumerate(taken)]
    assert own_runs == [1 + (i == mixed) for i in range(len(own_runs))]
    # before the switch of cycle 9, the text is plain decoding's
    expected = [run_alone(plain, p, sampling, seed=5 + i, steps=30) for i, p in enumerate(texts)]
    assert min(switched) >= 8
    assert [t[:n] for t, n in zip(tokens, switched)] == [e[:n] for e, n in zip(expected, switched)]
    assert tokens[0][switched[0]:] != expected[0][switched[0]:30]  # the switch shows


@pytest.mark.parametrize("make", [tree_backend, queued_tree_backend], ids=["host", "queued"])
def test_a_prefill_queues_the_first_cycle(dflash_artifact, make):
    """A plain step whose every session gave a token and would speculate at the next call (a
    prefill) queues that call's cycle: the drain of its taps, the draft block and the verify,
    uncommitted. The first cycle takes that verify (one target run in its call); a next call of
    other sessions drops it and runs its own. Nothing is queued after a prompt chunk without an
    output, for a session that may not speculate, or for more sessions than max_spec_batch.
    The text is plain decoding's either way."""
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(2, seed=31)
    expected = [run_alone(plain, p, GREEDY, seed=5 + i, steps=16) for i, p in enumerate(texts)]

    def executor(**options):
        return DFlashExecutor.load(dflash_artifact, backend=make(dflash_artifact),
                                   max_sessions=4, tree_nodes=7, **options)

    def cycles(spec, sids, history, until):
        taken, runs, take = [], [], spec._verify_taken

        def recording(requests, nodes):
            got = take(requests, nodes)
            taken.append(got is not None)
            return got

        spec._verify_taken = recording
        while min(len(history[s]) for s in sids) < until:
            before = spec.target.engine.runs
            for out in spec.execute([BatchInput(s, (history[s][-1],), spec.pos(s))
                                     for s in sids]):
                history[out.sid] += out.tokens
            runs.append(spec.target.engine.runs - before)
        return taken, runs

    spec = executor()
    sids, history = open_prefilled(spec, texts, GREEDY)
    queued = spec._ahead_verify
    assert queued is not None and queued.requests == [
        ProposalRequest(s, history[s][0], spec.pos(s)) for s in sids]
    taken, runs = cycles(spec, sids, history, 16)
    assert taken[0] and runs[0] == 1  # the prefill's verify, then the next cycle's queued
    assert [history[s][:16] for s in sids] == [e[:16] for e in expected]

    spec = executor()  # the next call is of one session: the queued verify is dropped
    sids, history = open_prefilled(spec, texts, GREEDY)
    taken, runs = cycles(spec, sids[:1], history, 16)
    assert not taken[0] and runs[0] == 2  # its own verify, then the next cycle's
    assert history[sids[0]][:16] == expected[0][:16]

    spec = executor()  # a prompt in two chunks: the first gives no token
    sid = spec.open_session()
    spec.set_sampling(sid, GREEDY, 5)
    head, tail = texts[0][:3], texts[0][3:]
    assert spec.execute([BatchInput(sid, tuple(head), 0, produce_output=False)]) == [None]
    assert spec._ahead_verify is None and spec._ahead is None
    out = spec.execute([BatchInput(sid, tuple(tail), len(head))])[0]
    assert spec._ahead_verify is not None and out.token == expected[0][0]

    spec = executor(speculate_sampled=False)  # a sampled session steps plainly: none
    open_prefilled(spec, texts[:1], SAMPLED)
    assert spec._ahead_verify is None and spec._ahead is None
    spec = executor(max_spec_batch=1)  # two sessions over the limit: none
    open_prefilled(spec, texts, GREEDY)
    assert spec._ahead_verify is None and spec._ahead is None


def test_a_pool_without_room_for_the_next_verify_queues_it_after_the_walk(dflash_artifact,
                                                                          monkeypatch):
    """Where the pool has no free cells for the next verify beside this cycle's rows, a cycle
    that walks on the device still queues the next block before its verdict, and the next
    verify after its walk (as the second sitting did): the same text, nothing walked."""
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(2, seed=21)
    expected = [run_alone(plain, p, GREEDY, seed=5 + i, steps=24) for i, p in enumerate(texts)]
    spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                               max_sessions=4, tree_nodes=7)
    monkeypatch.setattr(CellCache, "num_free", property(lambda self: 0))
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, GREEDY, 5 + i)
    assert spec_decode(spec, sids, texts, 20) == [e[:20] for e in expected]
    blocks = draft_calls(spec.draft.stats, suffix=" past verdict")
    assert spec.stats.walked == 0 and blocks == spec.stats.grown > 0


class TreeOracle:
    """Each block row's TOP_K choices: the target's own next token at the rank `ranks` gives
    (cycling; None: absent), other tokens around it, log-probabilities falling by rank."""

    def __init__(self, truth: dict[int, list[int]], ranks: list[int | None],
                 falling: bool = True):
        self.truth, self.ranks, self.calls, self.falling = truth, ranks, 0, falling

    def propose_choices(self, requests, n_draft):
        ids = np.zeros((len(requests), n_draft, names.TOP_K), np.int64)
        for o, request in enumerate(requests):
            for d in range(n_draft):
                true = self.truth[request.sid][request.position + 1 + d]
                rank = self.ranks[self.calls % len(self.ranks)]
                self.calls += 1
                others = [t for t in range(256) if t != true][d: d + names.TOP_K]
                row = others[: names.TOP_K]
                if rank is not None:
                    row = others[: rank] + [true] + others[rank: names.TOP_K - 1]
                ids[o, d] = row
        falling = [0.5, 0.25, 0.15, 0.1] + [0.1 / 2 ** r for r in range(1, names.TOP_K - 3)]
        logp = np.log(np.array(falling[: names.TOP_K] if self.falling else
                               [1 / names.TOP_K] * names.TOP_K))  # else: every choice alike
        return ids, np.broadcast_to(logp, ids.shape).copy()

    def propose(self, requests, n_draft):  # the chain a tree's first choices make
        return self.propose_choices(requests, n_draft)[0][..., 0]


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_a_tree_accepts_what_a_chain_of_first_choices_rejects(dflash_artifact, sampling):
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(2, seed=9)
    steps = 24
    expected = [run_alone(plain, p, sampling, seed=3 + i, steps=steps + 12)
                for i, p in enumerate(texts)]
    ranks = [0, 1, 0, 2, None, 0, 3, 1]
    accepted = {}
    for kind in ("chain", "tree"):
        oracle = TreeOracle({}, ranks)
        spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                                   max_sessions=4, proposer=oracle, n_draft=4,
                                   tree_nodes=7 if kind == "tree" else None)
        sids = [spec.open_session() for _ in texts]
        for i, sid in enumerate(sids):
            spec.set_sampling(sid, sampling, 3 + i)
            oracle.truth[sid] = list(texts[i]) + expected[i]
        assert spec_decode(spec, sids, texts, steps) == [e[:steps] for e in expected]
        accepted[kind] = spec.stats.accepted / spec.stats.cycles
    # a chain stops at the first row whose truth is not ranked first; the tree's 7 nodes
    # reach the second and third choices
    assert accepted["tree"] > accepted["chain"] + 0.3


def test_a_tree_reaches_past_the_fourth_choice_only_with_all_of_them(dflash_artifact):
    """Every row's choices equally likely and the truth always 6th: a tree of 7 is then the 7
    first-row choices (a second row's node scores lower), so it accepts a token every cycle
    from all TOP_K = 8 choices, and none from the first 4 (format 3's TOP_K) or as a chain.
    The text is plain decoding's in each."""
    assert names.TOP_K >= 6
    plain = plain_on_tree_backend(dflash_artifact)
    texts = prompts(2, seed=13)
    steps = 16
    expected = [run_alone(plain, p, GREEDY, seed=0, steps=steps + 12) for p in texts]
    accepted = {}
    for kind, nodes, choices in (("all", 7, None), ("4", 7, 4), ("chain", None, None)):
        oracle = TreeOracle({}, [5], falling=False)
        spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                                   max_sessions=4, proposer=oracle, n_draft=4,
                                   tree_nodes=nodes, tree_choices=choices)
        sids = [spec.open_session() for _ in texts]
        for i, sid in enumerate(sids):
            spec.set_sampling(sid, GREEDY, 0)
            oracle.truth[sid] = list(texts[i]) + expected[i]
        assert spec_decode(spec, sids, texts, steps) == [e[:steps] for e in expected]
        accepted[kind] = spec.stats.accepted / spec.stats.cycles
    assert accepted["all"] == 1.0
    assert accepted["4"] == accepted["chain"] == 0.0


def test_tree_nodes_refusals(dflash_artifact):
    for value, match in [(1, "expected an int"), (32, "expected an int"),
                         (True, "expected an int"), ("3", "expected an int")]:
        with pytest.raises(InvalidArgument, match=match):
            DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                                tree_nodes=value)
    with pytest.raises(InvalidArgument, match="backend ort-cpu cannot verify a tree"):
        DFlashExecutor.load(dflash_artifact, tree_nodes=3)
    for value, match in [(0, f"expected an int in \\[1, {names.TOP_K}\\]"),
                         (names.TOP_K + 1, "expected an int"),
                         (True, "expected an int"), ("1", "expected an int")]:
        with pytest.raises(InvalidArgument, match=match):
            DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                                tree_nodes=3, tree_choices=value)
    with pytest.raises(InvalidArgument, match="it shapes trees"):
        DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                            tree_choices=1)
    with pytest.raises(InvalidArgument, match="trees of at most 4 nodes, not tree_nodes 5"):
        DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                            tree_nodes=5, tree_choices=1, n_draft=4)
    assert DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                               tree_nodes=6, tree_choices=2, n_draft=2).tree_choices == 2
    with pytest.raises(InvalidArgument, match="a tree takes no threshold"):
        DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                            tree_nodes=3, draft_threshold=0.5)

    class ChainOnly:
        def propose(self, requests, n_draft):
            return np.zeros((len(requests), n_draft), np.int64)

    with pytest.raises(InvalidArgument, match="gives no top_ids"):
        DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                            tree_nodes=3, proposer=ChainOnly())
    # a target with sliding-window layers (none among the fixtures: its manifest, replaced)
    spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact))
    manifest = spec.manifest
    spec.manifest = dataclasses.replace(manifest, target_cache=tuple(
        dataclasses.replace(layer, window=8) for layer in manifest.target_cache))
    with pytest.raises(InvalidArgument, match="sliding-window"):
        spec._check_tree_nodes(3)
    spec.manifest = manifest
    assert spec._check_tree_nodes(3) == 3


def pool_rows(pools, name, cells):
    """Rows `cells` of a pool, host or device."""
    if hasattr(pools, "arrays"):
        return pools.arrays[name][cells]
    rows = np.empty(pools.shape, np.float32)
    pools.device.download(rows, pools.buffers[name])
    return rows[cells]


def test_tree_cycles_keep_the_draft_in_step(dflash_artifact):
    """Behind each verify the draft takes every row of the tree, keyed at its depth's position;
    after the verdict it keeps the accepted path as the target does, on the tree's main path
    (first choices) or off it: the draft is never behind after a cycle, and its keys are a
    fresh replay's."""
    plain = plain_on_tree_backend(dflash_artifact)
    text = prompts(1, seed=4)[0]
    expected = run_alone(plain, text, GREEDY, seed=0, steps=48)
    spec = DFlashExecutor.load(dflash_artifact, backend=tree_backend(dflash_artifact),
                               max_sessions=2, n_draft=4, tree_nodes=7)
    reference = DFlashExecutor.load(dflash_artifact, max_sessions=2)
    oracle = TreeOracle({}, [0, 1, 0, 2, None, 0, 3, 1, 0, 0])
    spec.proposer = oracle  # the draft still drains; the oracle proposes
    mains, paths = [], []
    drain_trees, keep_path = spec._drain_trees, spec.draft.cache.keep_path

    def recording_drain(requests, trees):
        mains.append(trees[0].main_path())
        drain_trees(requests, trees)

    def recording_keep(seq, start, path):
        paths.append(list(path))
        keep_path(seq, start, path)

    spec._drain_trees, spec.draft.cache.keep_path = recording_drain, recording_keep
    sid = spec.open_session()
    spec.set_sampling(sid, GREEDY)
    oracle.truth[sid] = list(text) + expected
    history = list(text)
    pending = spec.execute([BatchInput(sid, tuple(text), 0)])[0].token
    while len(history) < len(text) + 36:
        out = spec.execute([BatchInput(sid, (pending,), spec.pos(sid))])[0]
        history += [pending, *out.tokens[:-1]]
        pending = out.tokens[-1]
        assert history == (list(text) + expected)[: len(history)]
        assert spec.draft.cache.pos(sid) == spec.pos(sid) == len(history)
        spec.draft.cache.check()
    # some accepted paths stayed on the main path, some left it
    assert len(paths) == len(mains) > 0
    off = [path != main[: len(path)] for path, main in zip(paths, mains)]
    assert any(off) and not all(off)
    ref = reference.open_session()
    reference.set_sampling(ref, GREEDY)
    reference.execute([BatchInput(ref, tuple(history), 0, False)])
    reference._drain([ref])
    for name in ("k_pool.0", "v_pool.1"):
        np.testing.assert_allclose(
            pool_rows(spec.draft.pools, name, spec.draft.cache.cells_of(sid)),
            pool_rows(reference.draft.pools, name, reference.draft.cache.cells_of(ref)),
            atol=1e-5)


def test_backends_that_verify_chains_only_load_draft_blocks_without_the_choices(
        dflash_artifact):
    import onnx

    from cellspec.artifact import Manifest
    from cellspec.rewrite.graph import without_tree_choices
    from cellspec.runtime.device_sessions import rewritten

    manifest = Manifest.load(dflash_artifact)
    block = onnx.load(str(dflash_artifact / manifest.draft.block_graph),
                      load_external_data=False)
    target = onnx.load(str(dflash_artifact / manifest.target.graph), load_external_data=False)
    tree = {names.TOP_IDS, names.TOP_LOGP}

    def outputs(model):
        return {o.name for o in model.graph.output}

    assert tree <= outputs(block)
    for mode in ("decomposed", "grouped", "cuda"):
        stripped = rewritten(block, mode)
        assert outputs(stripped) == outputs(block) - tree
        assert not {"TopK", "LogSoftmax"} & {n.op_type for n in stripped.graph.node}
    assert tree <= outputs(rewritten(block, "cell"))  # CellAttention verifies trees
    assert without_tree_choices(target) is target
