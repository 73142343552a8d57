"""Engines: one graph, tensors bound by name. `ort-cpu` runs on numpy buffers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec.errors import ExecutionFailed, InvalidArgument, InvalidArtifact

BACKENDS = ("ort-cpu",)

_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(bfloat16)": None,
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | str | None, ...]  # ints for static dims, names/None for dynamic ones
    dtype: type | None  # numpy dtype, None when numpy has none (bfloat16)


class OrtCpuEngine:
    """An ONNX Runtime CPU session over one graph of an artifact."""

    # A static width buys nothing on the CPU (no CUDA graph to replay): slices run unpadded.
    pads_to_static_widths = False

    def __init__(self, path: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise InvalidArtifact(f"{path}: graph file missing")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.log_severity_level = 3
        # Spinning pool threads keep a core busy after each run; with several sessions (target,
        # draft) alternating on few cores they starve each other.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # ORT raises its own untyped errors for corrupt graphs
            raise InvalidArtifact(f"{path}: ONNX Runtime cannot load it: {error}") from error
        self.path = path
        self.inputs = {i.name: _spec(i) for i in self.session.get_inputs()}
        self.outputs = {o.name: _spec(o) for o in self.session.get_outputs()}

    def run(self, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        try:
            values = self.session.run(names, feeds)
        except Exception as error:  # the engine call failed: the caller poisons what it touched
            raise ExecutionFailed(f"{self.path.name}: ONNX Runtime run failed: {error}") from error
        return dict(zip(names, values))


MAX_THREADS = 256


def check_backend(backend: str, dtype: str, threads: int | None) -> None:
    """Refuse, before anything loads, a backend, dtype or thread count that cannot run."""
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if dtype == "bfloat16":
        raise InvalidArgument("backend ort-cpu runs float32 and float16 artifacts; this one is "
                              "bfloat16 (ONNX Runtime has no bfloat16 CPU kernels): export "
                              "with --dtype float32 or float16")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise InvalidArgument(f"threads {threads!r}: expected an integer in 1..{MAX_THREADS} "
                              "or None (all cores)")


def load_engine(path: Path, backend: str, threads: int | None = None) -> OrtCpuEngine:
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    return OrtCpuEngine(path, threads)


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type))
