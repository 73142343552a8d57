"""TensorRT engines built ahead of time from an artifact's ONNX graphs, no GPU needed.

TensorRT for RTX (`tensorrt_rtx`) parses a graph and compiles it for a chosen compute capability
on any machine; the engine is specialised to the device when it is first loaded. One engine per
(graph, compute capability), written next to its graph as `{graph_stem}.{sm}.plan`, with the
graph's optimization profiles in the order given.

TensorRT parses the graph rewritten into standard ops (`rewrite_for_tensorrt`, export/portable.py),
not the graph itself: the rewrite is written beside the graph as a temporary `{graph_stem}.trt.onnx`
whose initializers still reference the artifact's `weights.bin` (`parse_from_file` resolves it
beside the file), and removed once parsed, whether or not the parse succeeded. The weights are
stored in the plan; the artifact's graphs and weights are never changed.

A call writes every engine it builds or none: plans are written as `.partial` files and renamed
only once every build has succeeded.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import onnx

from cellspec.artifact import Engine
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.export.portable import rewrite_for_tensorrt
from cellspec.export.profiles import GraphProfiles, Profile, Shape, load_graph_header

__all__ = ["GraphProfiles", "build_engines", "compute_capability_name"]

log = logging.getLogger(__name__)
_INSTALL = "pip install 'cellspec[tensorrt]' (or: pip install tensorrt-rtx-cu13)"


def build_engines(artifact_dir: str | Path, graphs: Sequence[GraphProfiles],
                  compute_capabilities: Sequence[str], progress: bool = True) -> list[Engine]:
    """Build one engine per graph and compute capability ("sm80", "8.9", ...); return records.

    Raises `InvalidArgument` for an unknown compute capability, a profile that does not fit
    the graph's inputs or a graph with no standard-op form (4-bit weights: int4 artifacts get no
    engine), before any build; `InvalidArtifact` for a graph TensorRT cannot parse or build
    (naming the graph, the profile and TensorRT's message). On any error no engine is written.
    """
    trt = import_tensorrt()
    folder = Path(artifact_dir)
    targets = _capabilities(trt, compute_capabilities)
    names = [entry.graph for entry in graphs]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"graphs {names}: each graph at most once")
    for name in names:
        if not (folder / name).is_file():
            raise InvalidArtifact(f"{folder / name}: graph file not found")
    portable = {name: _rewrite(folder / name) for name in names}  # refusals before any build
    logger = _logger_type(trt)()
    builder = trt.Builder(logger)
    engines: list[Engine] = []
    partials: list[Path] = []
    pairs = [(entry.graph, sm) for entry in graphs for sm, _ in targets] if progress else []
    labels = iter(f"[{k}/{len(pairs)}] {graph} {sm}" for k, (graph, sm) in enumerate(pairs, 1))
    try:
        for entry in graphs:
            engines += _build_graph(trt, builder, logger, folder, entry, portable[entry.graph],
                                    targets, labels, partials)
    except BaseException:
        for partial in partials:
            partial.unlink(missing_ok=True)
        raise
    for partial in partials:
        partial.replace(partial.with_suffix(""))
    return engines


def import_tensorrt() -> Any:
    """The `tensorrt_rtx` module, or `InvalidArgument` saying how to install it."""
    try:
        import tensorrt_rtx
    except ImportError as error:
        raise InvalidArgument(f"building TensorRT engines needs TensorRT for RTX: {_INSTALL}"
                              ) from error
    return tensorrt_rtx


def compute_capability_name(value: str) -> str:
    """Canonical name of a compute capability: "sm80" for "sm80", "SM80", "8.0" or "80"."""
    match = re.fullmatch(r"(?:sm_?)?(\d+)(?:\.(\d))?", value.strip().lower())
    if match is None:
        raise InvalidArgument(f"compute capability {value!r}, expected e.g. 'sm89' or '8.9'")
    major, minor = match.groups()
    return f"sm{major}{minor or ''}"


def check_compute_capabilities(values: Sequence[str]) -> list[str]:
    """Refuse, before any work, capabilities this TensorRT for RTX cannot target (or no
    TensorRT at all); returns their canonical names."""
    return [name for name, _ in _capabilities(import_tensorrt(), values)]


def _capabilities(trt: Any, values: Sequence[str]) -> list[tuple[str, Any]]:
    supported = {name.lower(): member for name, member in trt.ComputeCapability.__members__.items()
                 if name.startswith("SM")}
    names = [compute_capability_name(v) for v in values]
    if not names or len(set(names)) != len(names):
        raise InvalidArgument(f"compute capabilities {list(values)}, need distinct ones")
    for name in names:
        if name not in supported:
            raise InvalidArgument(f"compute capability {name} not supported by TensorRT for RTX "
                                  f"{trt.__version__}; supported: {sorted(supported)}")
    return [(name, supported[name]) for name in names]


def _rewrite(path: Path) -> onnx.ModelProto:
    """The graph at `path` in standard ops, its weights left in their file."""
    try:
        return rewrite_for_tensorrt(load_graph_header(path))
    except InvalidArgument as error:
        raise InvalidArgument(f"{path.name}: {error}") from error


def _build_graph(trt: Any, builder: Any, logger: Any, folder: Path, entry: GraphProfiles,
                 portable: onnx.ModelProto, targets: list[tuple[str, Any]],
                 labels: Iterator[str], partials: list[Path]) -> list[Engine]:
    """portable: the graph rewritten; labels: the progress bar's title of each engine in build
    order; none: no bar."""
    path = folder / entry.graph
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)  # owns the parsed weights: alive until built
    if not _parse(parser, path, portable):
        raise InvalidArtifact(f"{entry.graph}: TensorRT cannot parse the graph: "
                              f"{_parser_errors(parser)}")
    inputs = {t.name: tuple(t.shape) for t in map(network.get_input, range(network.num_inputs))}
    for index, profile in enumerate(entry.profiles):
        _check_profile(f"{entry.graph} profile {index}", profile, inputs)
    engines = []
    for sm, capability in targets:
        desc = next(labels, None)
        plan = _build_one(trt, builder, logger, network, entry, sm, capability, desc)
        target = path.with_name(f"{path.stem}.{sm}.plan")
        partial = target.with_name(target.name + ".partial")
        partials.append(partial)
        partial.write_bytes(plan)
        engines.append(Engine(graph=entry.graph, path=str(target.relative_to(folder)),
                              compute_capability=sm, profiles=_records(entry.profiles)))
    return engines


def _parse(parser: Any, path: Path, portable: onnx.ModelProto) -> bool:
    """Parse `portable` from `{stem}.trt.onnx` beside the graph at `path`, so that its external
    initializers resolve to the artifact's weights file; the file is removed once parsed."""
    temporary = path.with_name(f"{path.stem}.trt.onnx")
    try:
        # serialized as is: no external data is written, the initializers keep their references
        temporary.write_bytes(portable.SerializeToString())
        return bool(parser.parse_from_file(str(temporary)))
    finally:
        temporary.unlink(missing_ok=True)


def _build_one(trt: Any, builder: Any, logger: Any, network: Any, entry: GraphProfiles,
               sm: str, capability: Any, desc: str | None) -> memoryview:
    profiles = list(enumerate(entry.profiles))
    plan = _serialize(trt, builder, logger, network, entry.graph, profiles, capability, desc)
    if plan is not None:
        return memoryview(plan)
    message, which = logger.take(), f"profile 0 {_shape_text(entry.profiles[0])}"
    if len(profiles) > 1:
        # The builder names no profile: build each alone to find the first that fails.
        which = "every profile together (each builds alone)"
        for index, profile in profiles:
            alone = [(index, profile)]
            if _serialize(trt, builder, logger, network, entry.graph, alone, capability) is None:
                message = logger.take()
                which = f"profile {index} {_shape_text(profile)} (the first that fails alone)"
                break
    raise InvalidArtifact(f"{entry.graph}: TensorRT cannot build an engine for {sm} with "
                          f"{which}: {message}")


def _serialize(trt: Any, builder: Any, logger: Any, network: Any, graph: str,
               profiles: list[tuple[int, Profile]], capability: Any, desc: str | None = None
               ) -> Any:
    """The serialized engine, or None when the builder fails (its messages are in `logger`)."""
    config = builder.create_builder_config()
    config.num_compute_capabilities = 1
    is_set = config.set_compute_capability(capability, 0)
    assert is_set, capability
    for index, profile in profiles:
        shapes = builder.create_optimization_profile()
        for name, (low, mid, high) in profile.items():
            shapes.set_shape(name, low, mid, high)
        if config.add_optimization_profile(shapes) < 0:
            raise InvalidArgument(f"{graph} profile {index}: TensorRT refused it: "
                                  f"{logger.take()}")
    monitor = _progress_type(trt)(desc) if desc else None
    if monitor is not None:
        config.progress_monitor = monitor
    logger.take()
    try:
        return builder.build_serialized_network(network, config)
    finally:
        if monitor is not None:
            monitor.close()


def _check_profile(where: str, profile: Profile, inputs: dict[str, Shape]) -> None:
    """TensorRT takes a profile that misses or misnames an input silently: refuse it here."""
    dynamic = {name for name, shape in inputs.items() if -1 in shape}
    unknown = sorted(profile.keys() - inputs.keys())
    if unknown:
        raise InvalidArgument(f"{where}: {unknown} not inputs of the graph ({sorted(inputs)})")
    missing = sorted(dynamic - profile.keys())
    if missing:
        raise InvalidArgument(f"{where}: no shapes for dynamic inputs {missing}")
    for name, shapes in profile.items():
        expected = inputs[name]
        if name not in dynamic:
            raise InvalidArgument(f"{where}: {name} is static {list(expected)}, leave it out")
        for shape in shapes:
            if len(shape) != len(expected) or any(
                    e not in (-1, s) for e, s in zip(expected, shape, strict=True)):
                raise InvalidArgument(f"{where}: {name} shape {list(shape)} does not fit the "
                                      f"graph's {list(expected)} (-1 = dynamic)")


def _records(profiles: Sequence[Profile]) -> tuple[dict[str, Any], ...]:
    """Profiles as the manifest stores them: {input: [min, opt, max]}, shapes as lists."""
    return tuple({name: [list(s) for s in shapes] for name, shapes in p.items()}
                 for p in profiles)


def _shape_text(profile: Profile) -> str:
    return "{" + ", ".join(f"{n}: {[list(s) for s in v]}" for n, v in profile.items()) + "}"


def _parser_errors(parser: Any) -> str:
    errors = (parser.get_error(i) for i in range(parser.num_errors))
    return "; ".join(f"node {e.node_name() or e.node()!r} ({e.node_operator()}): "
                     f"{e.code().name}: {_one_line(e.desc())}" for e in errors) or "no error"


def _one_line(message: str) -> str:
    return " ".join(message.split())


@functools.cache
def _logger_type(trt: Any) -> type:
    """TensorRT's logger: keeps warnings and errors for the next failure message."""

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[str] = []

        def log(self, severity: Any, message: str) -> None:
            if severity <= trt.ILogger.Severity.WARNING:
                self.messages.append(_one_line(message))
            log.debug("tensorrt %s: %s", severity.name, message)

        def take(self) -> str:
            taken, self.messages = self.messages, []
            return " | ".join(dict.fromkeys(taken)) or "no message"

    return Logger


@functools.cache
def _progress_type(trt: Any) -> type:
    """A tqdm bar over the steps of TensorRT's top-level build phase."""
    from tqdm.auto import tqdm

    class Progress(trt.IProgressMonitor):
        def __init__(self, desc: str) -> None:
            trt.IProgressMonitor.__init__(self)
            self.desc = desc
            self.bar: Any = None
            self.root: str | None = None

        def phase_start(self, phase: str, parent: str | None, num_steps: int) -> None:
            if parent is None and self.root is None:
                self.root = phase
                self.bar = tqdm(desc=self.desc, total=num_steps, unit="step")

        def phase_finish(self, phase: str) -> None:
            if phase == self.root:  # TensorRT may not report the last step complete
                self.bar.update(self.bar.total - self.bar.n)

        def step_complete(self, phase: str, step: int) -> bool:
            if phase == self.root:
                self.bar.update(1)
            return True  # False would cancel the build

        def close(self) -> None:
            if self.bar is not None:
                self.bar.close()

    return Progress
