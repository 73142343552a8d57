"""Pieces cover every token once, round by round; shapes pad to buckets only when static."""

import itertools

import numpy as np
import pytest

from cellspec.runtime.planner import (
    Chunk,
    Piece,
    PieceShape,
    ShapePolicy,
    piece_index,
    plan_pieces,
    runs_of,
    step_pieces,
)


@pytest.mark.parametrize("max_width", [1, 3, 8])
def test_pieces_cover_every_token_once_in_order(max_width):
    for lengths in itertools.product([1, 2, 3, 7, 9], repeat=3):
        pieces = plan_pieces(lengths, max_width)
        seen = {run: [] for run in range(len(lengths))}
        for piece in pieces:
            assert len({c.run for c in piece.chunks}) == len(piece.chunks)  # a run once
            for chunk in piece.chunks:
                assert chunk.count == piece.width <= max_width
                seen[chunk.run] += range(chunk.start, chunk.start + chunk.count)
        # each run's tokens in order: a chunk runs after the chunk before it
        assert seen == {run: list(range(n)) for run, n in enumerate(lengths)}


@pytest.mark.parametrize("max_width", [1, 3, 16])
def test_step_pieces_are_the_planned_pieces(max_width):
    """step_pieces' shortcuts (a decode step, one sequence's run) give what planning gives: each
    piece's width and the packed token of each slot, for every packing of runs of these
    lengths over shuffled sequence ids."""
    rng = np.random.default_rng(0)
    for lengths in [(1,), (1,) * 8, (5,), (16,), (17,), (3, 3), (1, 4, 1), (20, 1, 2)]:
        sids = rng.permutation(40)[: len(lengths)]
        seq_ids = np.repeat(sids, lengths).astype(np.int64)
        starts, runs = runs_of(seq_ids)
        planned = [(piece.width, piece_index(piece, starts))
                   for piece in plan_pieces(runs.tolist(), max_width)]
        got = step_pieces(seq_ids, max_width)
        assert [width for width, _ in got] == [width for width, _ in planned]
        for (_, index), (_, expected) in zip(got, planned):
            assert index.tolist() == expected.tolist()


def test_exact_pieces():
    assert plan_pieces([1, 1, 1], 256) == [Piece(1, (Chunk(0, 0, 1), Chunk(1, 0, 1),
                                                     Chunk(2, 0, 1)))]
    # decodes and a prompt chunk: two pieces, nothing padded
    assert plan_pieces([1, 200, 1], 256) == [Piece(1, (Chunk(0, 0, 1), Chunk(2, 0, 1))),
                                             Piece(200, (Chunk(1, 0, 200),))]
    assert plan_pieces([600, 4], 256) == [
        Piece(256, (Chunk(0, 0, 256),)), Piece(4, (Chunk(1, 0, 4),)),
        Piece(256, (Chunk(0, 256, 256),)), Piece(88, (Chunk(0, 512, 88),))]


def test_exact_policy_never_pads():
    policy = ShapePolicy()
    for rows, width, cells in itertools.product([1, 3, 40], [1, 5, 300], [0, 7, 5000]):
        assert policy.shape(rows, width, cells) == PieceShape(rows, width, cells, False)


def test_static_policy_buckets():
    policy = ShapePolicy(static_widths=(1, 4, 16), batch_buckets=(1, 2, 4, 8), min_cells=64,
                         max_cells=1024)
    assert policy.shape(3, 1, 10) == PieceShape(4, 1, 64, True)
    assert policy.shape(8, 3, 65) == PieceShape(8, 4, 128, True)
    assert policy.shape(1, 16, 1024) == PieceShape(1, 16, 1024, True)
    assert policy.shape(9, 1, 10) == PieceShape(9, 1, 10, False)  # more rows than a bucket
    assert policy.shape(1, 17, 10) == PieceShape(1, 17, 10, False)  # wider than static
    assert policy.shape(1, 1, 1025) == PieceShape(1, 1, 1025, False)  # past the last bucket
    assert [policy.cell_bucket(n) for n in (0, 1, 64, 65, 128, 129, 1000)] == [
        64, 64, 64, 128, 128, 256, 1024]


def test_exact_shapes_pad_cells_to_a_multiple_and_no_row_alone_in_a_tile():
    policy = ShapePolicy(lone_row_tile=128, cell_multiple=64)
    assert policy.shape(1, 1, 55) == PieceShape(2, 1, 64, False)  # 1 token: a padding row
    assert policy.shape(3, 1, 64) == PieceShape(3, 1, 64, False)
    assert policy.shape(129, 1, 65) == PieceShape(130, 1, 128, False)  # row 129 alone
    assert policy.shape(1, 129, 200) == PieceShape(2, 129, 256, False)
    assert policy.shape(8, 16, 1) == PieceShape(8, 16, 64, False)
    assert ShapePolicy().shape(1, 1, 55) == PieceShape(1, 1, 55, False)  # exact
    static = ShapePolicy((1, 4), (1, 8), 64, 1024, lone_row_tile=128, cell_multiple=64)
    assert static.shape(1, 1, 70) == PieceShape(8, 1, 128, True)  # padded rows: bucket 8
