"""What a device backend decides on the host, before any device call (numpy only, tested on
the CPU): the largest shape of every bound tensor, the shape of each output for the inputs at
hand, and which captured CUDA graph a static step replays.

A graph names its dynamic dims (`tokens ["S", "Q"]`, `attn_mask ["S", 1, "Q", "N + Q"]`,
`logits ["R", V]`, `proposals ["O", 4]`); a dim is an integer, a name, or a sum or product of
names and integers. The values of the names come from the inputs' actual shapes, so every
output's shape follows, and the limits of the names (the widest step, the longest context)
give the size to allocate each buffer once.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping, Sequence

from cellspec.errors import InvalidArgument

Dim = int | str | None


def evaluate(dim: Dim, values: Mapping[str, int]) -> int:
    """The size of one dim given the values of its names."""
    if isinstance(dim, int):
        return dim
    if dim is None:
        raise InvalidArgument("an unnamed dynamic dim: name it so its size can be known")
    return _evaluate(_parse(dim), values, dim)


@functools.lru_cache(maxsize=1024)
def _parse(dim: str) -> ast.expr:
    """A dim's expression, parsed once (a step evaluates a few hundred dims)."""
    return ast.parse(dim, mode="eval").body


def shape_of(dims: Sequence[Dim], values: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(d, values) for d in dims)


def learn_dims(dims: Sequence[Dim], shape: Sequence[int], values: dict[str, int],
               name: str) -> None:
    """Record the value of every plain name among `dims` from an input's actual `shape`, and
    refuse a shape that contradicts a value known already (or a static dim)."""
    if len(dims) != len(shape):
        raise InvalidArgument(f"input {name}: rank {len(shape)}, the graph's is {len(dims)}")
    for dim, size in zip(dims, shape):
        if isinstance(dim, str) and dim.isidentifier():
            known = values.setdefault(dim, int(size))
            if known != size:
                raise InvalidArgument(f"input {name}: dim {dim} is {size}, elsewhere {known}")
        elif isinstance(dim, int) and dim != size:
            raise InvalidArgument(f"input {name}: dim of size {size}, the graph's is {dim}")


def step_dims(inputs: Mapping[str, Sequence[Dim]], shapes: Mapping[str, Sequence[int]]
              ) -> dict[str, int]:
    """The value of every named dim, learnt from the inputs' actual shapes."""
    values: dict[str, int] = {}
    for name, shape in shapes.items():
        if name in inputs:
            learn_dims(inputs[name], shape, values, name)
    return values


class GraphIds:
    """One CUDA graph id per static shape key, in order of first use, at most `limit` (each
    captured graph holds device memory); keys past the limit run uncaptured (-1)."""

    UNCAPTURED = -1

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self.ids: dict[tuple, int] = {}

    def get(self, key: tuple | None) -> int:
        """The graph id of `key` (None: a dynamic step, never captured)."""
        if key is None:
            return self.UNCAPTURED
        if key not in self.ids and len(self.ids) < self.limit:
            self.ids[key] = len(self.ids)
        return self.ids.get(key, self.UNCAPTURED)


def _evaluate(node: ast.expr, values: Mapping[str, int], dim: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise InvalidArgument(f"dim {dim!r}: no value for {node.id} (known: "
                                  f"{sorted(values)})")
        return values[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _evaluate(node.left, values, dim), _evaluate(node.right, values, dim)
        return left + right if isinstance(node.op, ast.Add) else left * right
    raise InvalidArgument(f"dim {dim!r} is not built of names, integers, + and *")
