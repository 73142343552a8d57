"""Split a packed step into rectangular pieces the target graph runs, and choose their shapes.

A step feeds each of its inputs (runs) a few tokens of one sequence. The graph runs rectangles
[S, Q]: S rows of Q tokens, one sequence per row. `plan_pieces` cuts every run into chunks of at
most `max_width` tokens; chunk r of a run must follow chunk r - 1 (it reads the cells that chunk
writes), so chunks run round by round, and within a round, chunks of equal length share a piece.
Eight decodes and one prompt chunk are two pieces, [8, 1] and [1, 200]: no token is padded.

`ShapePolicy` is how a backend pads a piece: not at all on the CPU; on a GPU, rows to a batch
bucket, the width to a static width and the cells read to a power of two, so that each
(rows, width, cells) bucket can replay one captured CUDA graph.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np


class Chunk(NamedTuple):  # (a tuple: a decode step makes one per session)
    run: int  # index of the input the tokens come from
    start: int  # first token of the chunk within its run
    count: int


class Piece(NamedTuple):
    width: int  # Q: every chunk of the piece has this many tokens
    chunks: tuple[Chunk, ...]  # one row each, in input order


def plan_pieces(lengths: Sequence[int], max_width: int) -> list[Piece]:
    """Rectangular pieces covering every token of runs of `lengths` tokens exactly once."""
    assert max_width > 0 and all(n > 0 for n in lengths)
    if lengths and max_width >= lengths[0] == min(lengths) == max(lengths):
        # the usual step (a decode step, a verify): one piece of every run whole
        return [Piece(lengths[0], tuple(Chunk(run, 0, lengths[0])
                                        for run in range(len(lengths))))]
    pieces: list[Piece] = []
    for start in range(0, max(lengths, default=0), max_width):
        by_count: dict[int, list[Chunk]] = {}
        for run, length in enumerate(lengths):
            if start < length:
                count = min(max_width, length - start)
                by_count.setdefault(count, []).append(Chunk(run, start, count))
        pieces += [Piece(count, tuple(chunks)) for count, chunks in by_count.items()]
    return pieces


def step_pieces(seq_ids: np.ndarray, max_width: int) -> list[tuple[int, np.ndarray]]:
    """The pieces of a step fed to seq_ids [T] (one run per sequence), as plan_pieces cuts
    them: each one's width and the packed token of each of its slots [S, Q]. A decode step
    (every sequence one token) and one sequence's run of at most max_width tokens (a drain) are
    one piece each, found without planning."""
    ids = seq_ids.tolist()
    distinct = len(set(ids))
    if distinct == len(ids):
        return [(1, _slots(len(ids), 1))]
    if distinct == 1 and len(ids) <= max_width:
        return [(len(ids), _slots(1, len(ids)))]
    starts, lengths = runs_of(seq_ids)
    assert len(set(seq_ids[starts].tolist())) == starts.size, "one run per sequence"
    return [(piece.width, piece_index(piece, starts))
            for piece in plan_pieces(lengths.tolist(), max_width)]


@lru_cache(maxsize=256)
def _slots(rows: int, width: int) -> np.ndarray:
    """[rows, width]: the packed tokens 0 .. rows * width - 1 in row order (read-only, shared)."""
    slots = np.arange(rows * width, dtype=np.int64).reshape(rows, width)
    slots.flags.writeable = False
    return slots


def runs_of(seq_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first token and the length of each run of equal ids in a packed step [T]."""
    change = np.empty(seq_ids.size, dtype=bool)  # filled in place: a decode step calls this
    change[:1] = True
    np.not_equal(seq_ids[1:], seq_ids[:-1], out=change[1:])
    starts = np.flatnonzero(change)
    lengths = np.empty_like(starts)
    lengths[:-1] = starts[1:] - starts[:-1]
    lengths[-1:] = seq_ids.size - starts[-1:]
    return starts, lengths


def piece_index(piece: Piece, starts: np.ndarray) -> np.ndarray:
    """[S, Q]: the packed token of each slot of `piece` (its runs begin at `starts`)."""
    runs, offsets, _ = zip(*piece.chunks)
    first = starts[list(runs)] + np.array(offsets)
    return first[:, None] + np.arange(piece.width)


@dataclass(frozen=True)
class PieceShape:
    rows: int  # S, padding rows included
    width: int  # Q, padding tokens included
    cells: int  # N, cells read per row
    is_static: bool  # runs at a fixed shape (a CUDA graph may replay it)

    @property
    def label(self) -> str:
        """How per-method stats name a call of this shape: "static 8x1", "dynamic 1x221"."""
        return f"{'static' if self.is_static else 'dynamic'} {self.rows}x{self.width}"


@dataclass(frozen=True)
class ShapePolicy:
    """Exact shapes (no static widths) or static buckets. A piece is static when its width fits
    a static width and its rows a batch bucket; it then takes the narrowest of each and a
    power-of-two number of cells (at least `min_cells`, at most `max_cells`)."""

    static_widths: tuple[int, ...] = ()
    batch_buckets: tuple[int, ...] = ()
    min_cells: int = 64
    max_cells: int = 0  # the largest cell bucket (the context bound); 0 = exact shapes only
    # T > 0: no piece of T * k + 1 tokens; it gets a padding row. ONNX Runtime's CPU kernel
    # for 4-bit MatMulNBits (accuracy level 4) works in tiles of 128 rows and, on some CPUs
    # (ort_cpu.lone_rows_round_apart), rounds a row alone in its tile (M = 1, 129, 257, ...)
    # differently from the same row among others
    lone_row_tile: int = 0
    cell_multiple: int = 0  # > 0: exact shapes attend over a multiple of this many cells

    def shape(self, rows: int, width: int, cells: int) -> PieceShape:
        while self.lone_row_tile and rows * width % self.lone_row_tile == 1:
            rows += 1
        static_width = _bucket(width, self.static_widths)
        static_rows = _bucket(rows, self.batch_buckets)
        if static_width is None or static_rows is None or cells > self.max_cells:
            if self.cell_multiple:
                cells = -(-cells // self.cell_multiple) * self.cell_multiple
            return PieceShape(rows, width, cells, False)
        return PieceShape(static_rows, static_width, self.cell_bucket(cells), True)

    def cell_bucket(self, cells: int) -> int:
        """The smallest power of two >= cells and >= min_cells, capped at max_cells."""
        bucket = max(self.min_cells, 1 << max(0, cells - 1).bit_length())
        return min(bucket, self.max_cells)


def _bucket(value: int, buckets: tuple[int, ...]) -> int | None:
    index = bisect_left(buckets, value)
    return buckets[index] if index < len(buckets) else None
