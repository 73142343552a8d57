"""The `ort-cpu` backend: ONNX Runtime's CPU provider, numpy pools committed by indexing."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from cellspec.artifact import LOGITS
from cellspec.errors import ExecutionFailed, InvalidArgument, InvalidArtifact
from cellspec.rewrite import NEW_COLUMNS, attention_by_position, by_position_feeds
from cellspec.runtime.backend import Backend, Engine, Gather, Pools, TensorSpec
from cellspec.runtime.draws import DRAWN, Draws, draw_on_host

_ORT_TYPES = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
    "tensor(bfloat16)": None,
}
QUIET = 4  # ONNX Runtime's log severity "fatal": its own lines never reach the user's terminal


class OrtCpuEngine(Engine):
    """An ONNX Runtime CPU session over one graph of an artifact."""

    def __init__(self, path: Path, threads: int | None, spinning: bool = False) -> None:
        import onnxruntime as ort

        if not path.is_file():
            raise InvalidArtifact(f"{path}: graph file missing")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads or os.cpu_count() or 1
        options.log_severity_level = QUIET
        # Pool threads spin between the parallel loops of a run, and a lone session's keep
        # spinning after it, so its next run starts without waking them. With several sessions
        # (target, draft) alternating on few cores, an idle session's spinning would starve the
        # running one: theirs stop when each run ends (session.force_spinning_stop).
        options.add_session_config_entry("session.intra_op.allow_spinning", "1")
        options.add_session_config_entry("session.force_spinning_stop", "0" if spinning else "1")
        try:
            serialized = _by_position(path)
            if serialized is not None:  # weights still read from beside the graph
                options.add_session_config_entry(
                    "session.model_external_initializers_file_folder_path", str(path.parent))
            self.session = ort.InferenceSession(
                serialized or str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # ORT raises its own untyped errors for corrupt graphs
            raise InvalidArtifact(f"{path}: ONNX Runtime cannot load it: {error}") from error
        self.run_options = ort.RunOptions()
        self.run_options.log_severity_level = QUIET
        self.path = path
        self.inputs = {i.name: _spec(i) for i in self.session.get_inputs()}
        self.outputs = {o.name: _spec(o) for o in self.session.get_outputs()}

    def run(self, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
        if NEW_COLUMNS in self.inputs:
            feeds = {**feeds, **by_position_feeds(feeds)}
        try:
            values = self.session.run(names, feeds, self.run_options)
        except Exception as error:  # the engine call failed: the caller poisons what it touched
            raise ExecutionFailed(f"{self.path.name}: ONNX Runtime run failed: {error}") from error
        return dict(zip(names, values))


class HostPools(Pools):
    """numpy row pools, fed to every engine that reads them."""

    def __init__(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                 dtype: type) -> None:
        super().__init__(max_cells, pairs, width)
        size = len(self.pairs) * max_cells * width * np.dtype(dtype).itemsize
        try:
            self.arrays = {name: np.zeros((max_cells, width), dtype=dtype) for name in self.names}
        except MemoryError as error:
            raise InvalidArgument(f"pools of {max_cells} cells need {size / 2**30:.1f} GiB, more "
                                  "than this host can allocate: export with a smaller "
                                  "--max-cells") from error

    def commit(self, cells: np.ndarray, out: dict[str, np.ndarray]) -> None:
        """pool[cells[s, q]] = new[s, q] for every pool; padding lands in the scratch cell."""
        flat = cells.reshape(-1)
        for pool, new in self.pairs:
            self.arrays[pool][flat] = out[new].reshape(flat.size, self.width)


class OrtCpuBackend(Backend):
    """`spinning`: the engines' pool threads keep spinning between runs, for an executor whose
    only engine is the target (plain decoding); with a draft they stop when a run ends (see
    OrtCpuEngine)."""

    name = "ort-cpu"

    def __init__(self, threads: int | None = None, spinning: bool = False) -> None:
        self.threads = threads
        self.spinning = spinning

    def load_engine(self, path: Path) -> OrtCpuEngine:
        return OrtCpuEngine(path, self.threads, self.spinning)

    def make_pools(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                   dtype: type) -> HostPools:
        return HostPools(max_cells, pairs, width, dtype)

    def run(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
            outputs: list[str], cells: np.ndarray | None = None,
            draws: Draws | None = None, static: bool = False,
            gather: Gather | None = None) -> dict[str, np.ndarray]:
        assert isinstance(engine, OrtCpuEngine) and all(isinstance(p, HostPools) for p in pools)
        bound = {name: array for p in pools for name, array in p.arrays.items()
                 if name in engine.inputs}
        if gather is not None:
            bound[gather.name] = gather.pools.arrays[gather.pool][gather.cells]
        logits = [LOGITS] if draws is not None and LOGITS not in outputs else []
        committed = [n for p in pools for n in p.new_names] if cells is not None else []
        out = engine.run({**feeds, **bound}, list(dict.fromkeys(outputs + logits + committed)))
        for p in pools if cells is not None else ():
            p.commit(cells, out)
        result = {name: out[name] for name in outputs}
        if draws is not None:  # the logits are on the host already: draw here
            result[DRAWN] = draw_on_host(out[LOGITS], draws)
        return result


def _by_position(path: Path) -> bytes | None:
    """The target graph at `path` with its attention by position (cellspec/rewrite/attention.py:
    so that a token's logits do not depend on whether a verify or a later step feeds it),
    serialized; None for other graphs, which load from `path` as they are."""
    model = onnx.load(str(path), load_external_data=False)
    rewritten = attention_by_position(model)
    return None if rewritten is model else rewritten.SerializeToString()


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type))
