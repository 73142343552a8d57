"""Optimization profiles: the (min, opt, max) shape of every dynamic graph input, per profile.

A graph's dynamic dims are named in its ONNX inputs (`tokens ["S", "Q"]`,
`attn_mask ["S", 1, "Q", "N + Q"]`); a profile is derived from ranges over those names. A dim
named by a sum or product of names (`"N + Q"`) is evaluated from the names' ranges: both
operators are monotone over non-negative sizes, so evaluating at every min, every opt and every
max bounds the dim exactly.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from cellspec.artifact import ATTN_MASK, CELL_TABLE, LOGITS_ROWS, TOKENS, TargetMethod
from cellspec.errors import InvalidArgument, InvalidArtifact

Shape = tuple[int, ...]
DimRange = tuple[int, int, int]  # (min, opt, max) of one named dim
Profile = dict[str, tuple[Shape, Shape, Shape]]  # input name -> (min, opt, max) shapes


@dataclass(frozen=True)
class GraphProfiles:
    """One ONNX graph file of an artifact and its optimization profiles, in engine order."""

    graph: str  # file name inside the artifact, e.g. "target.onnx"
    profiles: tuple[Profile, ...]

    def __post_init__(self) -> None:
        if not self.profiles:
            raise InvalidArgument(f"{self.graph}: no optimization profiles, need at least one")
        for index, profile in enumerate(self.profiles):
            for name, shapes in profile.items():
                _check_shapes(f"{self.graph} profile {index} input {name}", shapes)


def dynamic_dims(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    """Every graph input with a dynamic dim -> its dims: int when static, the dim name if not."""
    initializers = {t.name for t in model.graph.initializer}
    result: dict[str, list[int | str]] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims: list[int | str] = []
        for index, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                dims.append(dim.dim_value)
            elif dim.dim_param:
                dims.append(dim.dim_param)
            else:
                raise InvalidArtifact(f"{model.graph.name}: input {value.name} dim {index} is "
                                      f"dynamic but unnamed; name it so a profile can bound it")
        if any(isinstance(d, str) for d in dims):
            result[value.name] = dims
    return result


def make_profile(inputs: Mapping[str, Sequence[int | str]], ranges: Mapping[str, DimRange]
                 ) -> Profile:
    """One profile: each dynamic input's (min, opt, max) shapes from ranges over dim names."""
    profile: Profile = {}
    for name, dims in inputs.items():
        per_dim = [_dim_range(d, ranges, f"input {name}") for d in dims]
        mins, opts, maxs = (tuple(r[k] for r in per_dim) for k in range(3))
        profile[name] = (mins, opts, maxs)
    return profile


def with_derived(ranges: Mapping[str, DimRange], derived: Mapping[str, str]
                 ) -> dict[str, DimRange]:
    """`ranges` plus the dims named in `derived`, each a sum or product of names before it:
    with_derived({"N": (0, 8, 8), "T": (1, 4, 4)}, {"S": "N + T"})["S"] == (1, 12, 12)."""
    result = dict(ranges)
    for name, expression in derived.items():
        result[name] = _dim_range(expression, result, f"dim {name}")
    return result


def make_graph_profiles(artifact_dir: str | Path, graph: str,
                        ranges: Sequence[Mapping[str, DimRange]]) -> GraphProfiles:
    """Profiles for one graph file of the artifact, one per entry of `ranges`, in that order."""
    inputs = dynamic_dims(load_graph_header(Path(artifact_dir) / graph))
    return GraphProfiles(graph, tuple(make_profile(inputs, r) for r in ranges))


def target_ranges(target: TargetMethod, max_context: int) -> list[dict[str, DimRange]]:
    """Ranges over S (rows), Q (tokens per row), R (logits rows) and N (cells read per row) for
    the target graph.

    One profile per static width w (Q = w exactly), then the dynamic method's profile
    (Q in [1, dynamic_width]) when it has one. In every profile S spans [1, the largest batch
    bucket], R [1, S * Q] at its largest, and N [0, max_context]: a row may read no cell (a fresh
    session) or, at most, a whole session's context. Each opt is the max.
    """
    if max_context < 1:
        raise InvalidArgument(f"max_context {max_context}, need >= 1")
    rows, cells = target.batch_buckets[-1], (0, max_context, max_context)
    widths = [(w, w) for w in target.static_widths]
    if target.dynamic_width > 0:
        widths.append((1, target.dynamic_width))
    return [{"S": (1, rows, rows), "Q": (low, high, high), "R": (1, rows * high, rows * high),
             "N": cells} for low, high in widths]


def target_profiles(artifact_dir: str | Path, target: TargetMethod, max_context: int
                    ) -> GraphProfiles:
    """The target graph's profiles (see `target_ranges`), whatever it names its dims.

    S, Q, N and R are read from `tokens` dims 0 and 1, `cell_table` dim 1 and `logits_rows`
    dim 0. `attn_mask` dim 3 is N + Q by the ABI: named either by that sum ("N + Q") or by a name
    of its own, which then gets the range N + Q.
    """
    inputs = dynamic_dims(load_graph_header(Path(artifact_dir) / target.graph))
    names = {"S": _dim_name(inputs, TOKENS, 0, target.graph),
             "Q": _dim_name(inputs, TOKENS, 1, target.graph),
             "N": _dim_name(inputs, CELL_TABLE, 1, target.graph),
             "R": _dim_name(inputs, LOGITS_ROWS, 0, target.graph)}
    span = _dim_name(inputs, ATTN_MASK, 3, target.graph)
    profiles = []
    for abi in target_ranges(target, max_context):
        ranges = {names[k]: r for k, r in abi.items()}
        if span.isidentifier() and span not in ranges:
            ranges[span] = with_derived(abi, {span: "N + Q"})[span]
        profiles.append(make_profile(inputs, ranges))
    return GraphProfiles(target.graph, tuple(profiles))


def _dim_name(inputs: Mapping[str, Sequence[int | str]], name: str, index: int, graph: str
              ) -> str:
    dims = list(inputs.get(name, ()))
    dim = dims[index] if index < len(dims) else None
    if not isinstance(dim, str):
        raise InvalidArtifact(f"{graph}: input {name} dim {index} should be a named dynamic dim, "
                              f"found dims {dims}")
    return dim


def load_graph_header(path: Path) -> onnx.ModelProto:
    """The graph at `path` without its external data (weights stay references to their file)."""
    if not path.is_file():
        raise InvalidArtifact(f"{path}: graph file not found")
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as error:  # onnx raises DecodeError and others on a corrupt file
        raise InvalidArtifact(f"{path}: not a readable ONNX graph ({error})") from error


def _dim_range(dim: int | str, ranges: Mapping[str, DimRange], where: str) -> DimRange:
    if isinstance(dim, int):
        return (dim, dim, dim)
    try:
        tree = ast.parse(dim, mode="eval").body
    except SyntaxError as error:
        raise InvalidArgument(f"{where}: dim {dim!r} is not a name or sum") from error
    low, mid, high = (_evaluate(tree, ranges, k, where, dim) for k in range(3))
    return (low, mid, high)


def _evaluate(node: ast.expr, ranges: Mapping[str, DimRange], k: int, where: str, dim: str
              ) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and node.value >= 0:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in ranges:
            raise InvalidArgument(f"{where}: dim {node.id!r} has no range "
                                  f"(given {sorted(ranges)})")
        return ranges[node.id][k]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left = _evaluate(node.left, ranges, k, where, dim)
        right = _evaluate(node.right, ranges, k, where, dim)
        return left + right if isinstance(node.op, ast.Add) else left * right
    raise InvalidArgument(f"{where}: dim {dim!r} is not built of names, integers, + and *")


def _check_shapes(where: str, shapes: tuple[Shape, Shape, Shape]) -> None:
    if len(shapes) != 3 or len({len(s) for s in shapes}) != 1:
        raise InvalidArgument(f"{where}: {shapes}, need (min, opt, max) shapes of one rank")
    for low, mid, high in zip(*shapes, strict=True):
        if not 0 <= low <= mid <= high:
            raise InvalidArgument(f"{where}: {shapes}, need 0 <= min <= opt <= max per dim")
