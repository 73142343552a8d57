"""The `ort-cpu` backend: ONNX Runtime's CPU provider, numpy pools committed by indexing."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

import numpy as np
import onnx

from cellspec.artifact import LOGITS, Manifest
from cellspec.errors import ExecutionFailed, InvalidArgument, InvalidArtifact
from cellspec.rewrite import NEW_COLUMNS, attention_by_position, by_position_feeds
from cellspec.rewrite.graph import without_tree_choices
from cellspec.runtime.backend import Backend, Engine, Gather, Pools, TensorSpec
from cellspec.runtime.draws import DRAWN, Draws, draw_on_host
from cellspec.runtime.planner import ShapePolicy

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
        self._lone_rows_apart: dict[Path, bool] = {}  # by artifact folder: see shape_policy

    def load_engine(self, path: Path) -> OrtCpuEngine:
        return OrtCpuEngine(path, self.threads, self.spinning)

    def shape_policy(self, manifest: Manifest, folder: Path) -> ShapePolicy:
        """Backend.shape_policy's, without the padding of lone rows where this CPU's kernels
        round a row alone in its tile as they do among others (lone_rows_round_apart: on an
        AMD EPYC with AVX-512 VNNI, none did; on one with AVX2 only, all did)."""
        policy = super().shape_policy(manifest, folder)
        if not policy.lone_row_tile:
            return policy
        key = Path(folder).resolve()  # the target and the draft ask alike: the graphs read once
        if key not in self._lone_rows_apart:
            self._lone_rows_apart[key] = lone_rows_round_apart(
                nbits_configs(manifest, folder), self.threads or os.cpu_count() or 1)
        if not self._lone_rows_apart[key]:
            return ShapePolicy(lone_row_tile=0, cell_multiple=policy.cell_multiple)
        return policy

    def make_pools(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                   dtype: type) -> HostPools:
        return HostPools(max_cells, pairs, width, dtype)

    def run(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
            outputs: list[str], cells: np.ndarray | None = None,
            draws: Draws | None = None, static: bool = False,
            gather: Gather | None = None,
            meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
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
        if meanwhile is not None:
            meanwhile()
        return result


def nbits_configs(manifest: Manifest, folder: Path) -> frozenset[tuple[int, ...]]:
    """Each (K, N, bits, block_size, accuracy_level, zero points or not) of a MatMulNBits node
    in the artifact's target and draft graphs."""
    graphs = [manifest.target.graph]
    if manifest.draft is not None:
        graphs += [manifest.draft.context_graph, manifest.draft.block_graph]
    configs = set()
    for graph in graphs:
        model = onnx.load(str(folder / graph), load_external_data=False)
        for node in model.graph.node:
            if node.op_type == "MatMulNBits":
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
                configs.add((*(int(attrs.get(name, 0)) for name in
                                   ("K", "N", "bits", "block_size", "accuracy_level")),
                             int(len(node.input) > 3 and node.input[3] != "")))
    return frozenset(configs)


LONE_TILE = 128  # ONNX Runtime's CPU MatMulNBits works in tiles of 128 rows


@cache
def lone_rows_round_apart(configs: frozenset[tuple[int, ...]], threads: int) -> bool:
    """Whether ONNX Runtime's CPU MatMulNBits, on this CPU and with `threads` threads (the
    engines'), rounds a row alone in its tile of 128 rows (M = 1, 129) otherwise than the same
    row among others (M = 2, 130), for any of `configs` (nbits_configs'): random weights and
    rows, each set once per process (N capped at 4,096 columns: a row's rounding is its
    columns' K sums)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    for k, n, bits, block, level, zero_points in sorted(configs):
        n = min(n, 4096)
        blocks = -(-k // block)
        weights = [rng.integers(0, 256, (n, blocks, block * bits // 8), np.uint8),
                   (rng.random(n * blocks, np.float32) * 0.02).astype(np.float32)]
        if zero_points:  # bits-wide codes packed along each column's blocks
            weights.append(rng.integers(0, 256, n * -(-blocks * bits // 8), np.uint8))
        names = ["w", "s", "z"][:len(weights)]
        node = helper.make_node("MatMulNBits", ["x", *names], ["y"], domain="com.microsoft",
                                K=k, N=n, bits=bits, block_size=block, accuracy_level=level)
        graph = helper.make_graph(
            [node], "probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])],
            [numpy_helper.from_array(w, name) for w, name in zip(weights, names)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                        helper.make_opsetid("com.microsoft", 1)])
        options = ort.SessionOptions()
        options.log_severity_level = QUIET
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        x = rng.standard_normal((LONE_TILE + 2, k)).astype(np.float32)
        for lone in (1, LONE_TILE + 1):
            alone, among = (session.run(None, {"x": x[:m]})[0] for m in (lone, lone + 1))
            if not np.array_equal(alone, among[:lone]):
                return True
    return False


def _by_position(path: Path) -> bytes | None:
    """The target graph at `path` with its attention by position (cellspec/rewrite/attention.py:
    so that a token's logits do not depend on whether a verify or a later step feeds it), or a
    draft_block without its tree outputs (ort-cpu verifies chains only:
    rewrite.graph.without_tree_choices), serialized; None for other graphs, which load from
    `path` as they are."""
    model = onnx.load(str(path), load_external_data=False)
    rewritten = without_tree_choices(attention_by_position(model))
    return None if rewritten is model else rewritten.SerializeToString()


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type))
