"""Trees of draft proposals: grown from the draft's top choices per block row, verified in one
target step whose rows each see only their ancestors, walked by the target's draws.

A DFlash block predicts every row from the anchor's context alone, so row d's top choices
(`ids [n, k]`, their log-probabilities `logp [n, k]`, best first) are the same whatever path
leads to depth d. `grow_tree` takes the B most probable paths' nodes under the product of the
rows' probabilities, best first: a node's score is its path's summed logp, and since scores
only fall along a path and along a row's choices, each node is found after its parent, so the
nodes come out parents first. The verify's rows are [anchor, node 1, ..., node B]: row i sits
at position p + depth(i) (the anchor at p), and sees the sequence's cells and its ancestors
among the rows (`ancestor_mask`), each at its own position. The target draws a token for every
row with the uniform of the position after it, as plain decoding would there; `walk` follows
from the anchor the child whose token is the draw, as long as one is, so the accepted path is
exactly the text plain decoding writes (bench/NOTES.md, 2026-12-03: tau 2.80 for a tree of 7
proposals against 2.45 for a chain of 7, offline).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from cellspec.errors import InvalidArgument


@dataclass(frozen=True)
class DraftTree:
    """A verify's rows: row 0 the anchor, rows 1..B the nodes, every parent before its
    children."""

    tokens: np.ndarray  # [B] int64: node i + 1's token
    parents: np.ndarray  # [B + 1] int64: each row's parent row, -1 for the anchor
    depths: np.ndarray  # [B + 1] int64: 0 for the anchor

    @property
    def rows(self) -> int:
        return self.parents.size

    @classmethod
    def from_record(cls, record: np.ndarray) -> DraftTree:
        """The tree a device's grow_trees recorded: record [3, rows] holds every row's token
        (the anchor's first), parent and depth."""
        return cls(record[0, 1:].copy(), record[1].copy(), record[2].copy())

    def main_path(self) -> list[int]:
        """The rows of the draft's first choices: from the anchor, each row's first child (a
        node's children are found best first, so the lowest row is its best)."""
        first_child: dict[int, int] = {}
        for row, parent in enumerate(self.parents.tolist()):
            first_child.setdefault(parent, row)
        path = [0]
        while path[-1] in first_child:
            path.append(first_child[path[-1]])
        return path


def tree_capacity(choices: int, depth: int) -> int:
    """The most nodes a tree holds below its anchor with `choices` children a node and `depth`
    levels: choices + choices^2 + ... + choices^depth."""
    return sum(choices ** d for d in range(1, depth + 1))


def grow_tree(ids: np.ndarray, logp: np.ndarray, nodes: int,
              choices: int | None = None) -> DraftTree:
    """The `nodes` most probable nodes (module doc) from `ids`/`logp` [n, k] (row d - 1: depth
    d's choices, best first), of each row only the first `choices` (all k where None, as the
    device's grow_trees takes them); ties go to the node found first (lower depth, then
    choice)."""
    depth_limit, branches = ids.shape
    if logp.shape != ids.shape or depth_limit < 1 or branches < 1:
        raise InvalidArgument(f"draft choices {ids.shape} and log-probabilities {logp.shape}: "
                              "expected the same [n >= 1, k >= 1]")
    if nodes < 1:
        raise InvalidArgument(f"tree of {nodes} nodes: expected at least 1")
    if choices is not None:
        if not 1 <= choices <= branches:
            raise InvalidArgument(f"{choices} choices of a row of {branches}: expected 1.."
                                  f"{branches}")
        branches = choices
    # candidates: (-score, order, depth, choice, parent row); a popped node offers its next
    # sibling (same parent, next choice) and its first child (next depth, first choice)
    rows_logp = logp.astype(np.float64).tolist()
    heap = [(-rows_logp[0][0], 0, 1, 0, 0)]
    order, tokens, parents, depths, scores = 1, [], [-1], [0], [0.0]
    while heap and len(tokens) < nodes:
        negative, _, depth, choice, parent = heapq.heappop(heap)
        row = len(parents)
        tokens.append(int(ids[depth - 1, choice]))
        parents.append(parent)
        depths.append(depth)
        scores.append(-negative)
        if choice + 1 < branches:
            heapq.heappush(heap, (-(scores[parent] + rows_logp[depth - 1][choice + 1]), order,
                                  depth, choice + 1, parent))
            order += 1
        if depth < depth_limit:
            heapq.heappush(heap, (negative - rows_logp[depth][0], order, depth + 1, 0, row))
            order += 1
    return DraftTree(np.array(tokens, np.int64), np.array(parents, np.int64),
                     np.array(depths, np.int64))


def ancestor_mask(parents: np.ndarray) -> np.ndarray:
    """[R, R] bool: row i sees row j iff j is i or one of its ancestors (parents [R], each
    parent before its child, -1 for the root)."""
    rows = parents.size
    mask = np.zeros((rows, rows), dtype=bool)
    for i, parent in enumerate(parents.tolist()):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return mask


def depths_of(parents: np.ndarray) -> np.ndarray:
    """[R] each row's depth (parents as in ancestor_mask)."""
    depths = np.zeros(parents.size, dtype=np.int64)
    for i, parent in enumerate(parents.tolist()):
        if parent >= 0:
            depths[i] = depths[parent] + 1
    return depths


def walk(tree: DraftTree, drawn: np.ndarray) -> tuple[list[int], tuple[int, ...]]:
    """The accepted path's rows (the anchor's 0 first) and the cycle's tokens (the accepted
    nodes' then the draw after the last of them), given the target's draw at every row."""
    tokens = tree.tokens.tolist()  # (as Python ints: a round walks every owner's tree)
    children = dict(zip(zip(tree.parents[1:].tolist(), tokens), range(1, len(tokens) + 1)))
    drawn = np.asarray(drawn).tolist()
    path, row = [0], 0
    while (child := children.get((row, drawn[row]))) is not None:
        path.append(child)
        row = child
    return path, (*(tokens[i - 1] for i in path[1:]), drawn[row])
