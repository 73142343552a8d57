"""IOBinding backends: ONNX Runtime on buffers a device owns, bound by address, never copied
whole. `ort-cuda` is this on the CUDA provider with PyCUDA memory and CUDA graphs; the tests run
it on the CPU provider over numpy memory (`HostDevice`).

Every graph output gets one buffer, allocated once at its largest shape. A step packs its host
inputs (ids, positions, cell tables, masks) into one page-locked arena, copies it to the
engine's device arena in one call, binds each input there at the step's shape, and runs.
Pools are bound where a graph reads them; the step's k_new/v_new stay on the device and one
kernel scatters them into the pools' cells. Static steps (padded to the shape policy's
buckets) replay one captured CUDA graph per shape (`gpu_graph_id`); the others run uncaptured.
Only what the caller asks for comes back: the drawn tokens (greedy from the graph's argmax,
or the sampler graph on the device), the taps, the proposals.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from cellspec import artifact as names
from cellspec.artifact import Manifest
from cellspec.errors import ExecutionFailed, InvalidArgument, InvalidArtifact
from cellspec.rewrite import ATTN_SEQLENS, HOST_INPUTS
from cellspec.runtime.backend import Backend, Chain, Engine, Gather, Pools, TensorSpec
from cellspec.runtime.bindings import GraphIds, shape_of, step_dims
from cellspec.runtime.device import Buffer
from cellspec.runtime.draws import DRAWN, Draws
from cellspec.runtime.planner import ShapePolicy

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
              "tensor(bfloat16)": None}
_BF16 = 16  # onnx.TensorProto.BFLOAT16: numpy has no bfloat16, bind it by its ONNX type
QUIET = 4
_INSTALL = "pip install 'cellspec[gpu]' (onnxruntime-gpu and pycuda)"
# Merges the QKV and gate/up Slices back into a Split, whose uneven sizes the CUDA provider
# copies from the host on every call (replayed by every CUDA graph).
DISABLED_OPTIMIZERS = ["GatherSliceToSplitFusion"]


class _Staging:
    """Page-locked host buffers, used in turns, for copies to the device that are queued and
    not waited for: a buffer is written again only once the copy queued from it last has run
    (its mark is passed). Runs on the device's stream do not wait for their inputs' copies, so
    three pieces in a row (a long drain) would otherwise overwrite a copy still queued."""

    def __init__(self, device, nbytes: int, count: int = 2) -> None:
        self.device, self.turn = device, 0
        self.buffers = [device.pinned(nbytes) for _ in range(count)]
        self.marks: list = [None] * count

    def take(self) -> np.ndarray:
        """The next buffer, free to write."""
        self.turn = (self.turn + 1) % len(self.buffers)
        if self.marks[self.turn] is not None:
            self.marks[self.turn].synchronize()
            self.marks[self.turn] = None
        return self.buffers[self.turn]

    def upload(self, buffer: Buffer, nbytes: int) -> None:
        """Queue the copy of the taken buffer's first `nbytes` to `buffer`."""
        self.device.upload(buffer, self.buffers[self.turn][:nbytes])
        self.marks[self.turn] = self.device.mark()


class _Session:
    """An ONNX Runtime session, its IOBinding and the CUDA graphs it captured."""

    def __init__(self, session) -> None:
        self.session, self.binding, self.graph_ids = session, session.io_binding(), GraphIds()
        self.inputs = {i.name for i in session.get_inputs()}
        # (name, is_input) -> (shape, address, where) as bound now: a binding stays until it
        # changes, so a step rebinds only what moved (a pool or a buffer is bound once)
        self.bound: dict[tuple[str, bool], tuple] = {}
        self.pools_bound: dict[int, Pools] = {}  # pools bound as inputs (they never move)
        self.outputs_key: tuple | None = None  # (dims, wanted) of the outputs as bound now


class DeviceEngine(Engine):
    """One graph on IOBinding sessions: a buffer per input and output at its largest shape
    (pools excepted: they are bound where they live), and a CUDA graph per static shape.

    `wide`: a second session of the same graph for pieces of several rows of several tokens,
    which GroupQueryAttention refuses ("batch_size must be 1 when sequence_length > 1 and past
    context is given"); the buffers are the engine's, shared."""

    def __init__(self, path: Path, session, device, limits: dict[str, int],
                 wide=None, in_order: bool = False) -> None:
        self.path, self.device, self.in_order = path, device, in_order
        self.main = _Session(session)
        self.wide = None if wide is None else _Session(wide)
        self.active = self.main
        self.inputs = {i.name: _spec(i) for i in session.get_inputs()}
        self.outputs = {o.name: _spec(o) for o in session.get_outputs()}
        self.input_dims = {name: spec.shape for name, spec in self.inputs.items()}
        self.run_options: dict[int, object] = {}  # graph id -> ONNX Runtime's RunOptions
        self.buffers: dict[str, Buffer] = {}
        self.host: dict[str, np.ndarray] = {}  # inputs a provider reads from host memory
        self.shape_memo: dict[tuple, tuple[dict[str, tuple], list[str]]] = {}
        self.sizes: dict[str, int] = {}  # bytes of each input at its largest shape
        arena = 0
        for name, spec in {**self.inputs, **self.outputs}.items():
            size = int(np.prod(shape_of(spec.shape, limits))) * _itemsize(spec)
            if name in HOST_INPUTS:
                self.host[name] = np.zeros(max(size, 8), np.uint8)
            elif name in self.outputs:
                self.buffers[name] = device.alloc(size)
            elif not name.startswith(("k_pool.", "v_pool.")) and name != names.LOGITS:
                self.sizes[name] = size  # (pools and the sampler's logits are borrowed)
                arena += _aligned(size)
        # a step's host feeds, packed: one copy to the device per step, not one per input
        self.arena, self.staging = device.alloc(arena), _Staging(device, arena)
        self.layouts: dict[tuple, tuple[dict[str, int], int]] = {}  # see _layout

    @property
    def graph_ids(self) -> GraphIds:
        return self.main.graph_ids

    def stage(self, feeds: dict[str, np.ndarray]) -> dict[str, int]:
        """Choose the session for the step's shape, copy the host feeds it reads into their
        buffers (async) and bind them; returns the dim values."""
        dims = step_dims(self.input_dims, {n: a.shape for n, a in feeds.items()})
        is_wide = dims.get("S", dims.get("O", 1)) > 1 and dims.get("Q", 1) > 1
        self.active = self.wide if is_wide and self.wide else self.main
        staged = {}
        for name, array in feeds.items():
            if name not in self.active.inputs:
                continue
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            if name in self.host:  # read by the provider on the host: bound there
                self.host[name][: data.size] = data
                self._bind(name, array.shape, self.host[name].ctypes.data, True, "cpu")
            else:
                staged[name] = data
        offsets, end = self._layout(feeds, staged)
        if staged:
            arena_host = self.staging.take()
            for name, data in staged.items():
                arena_host[offsets[name]: offsets[name] + data.size] = data
            self.staging.upload(self.arena, end)
        for name in staged:
            self._bind(name, feeds[name].shape, self.arena.ptr + offsets[name], is_input=True)
        return dims

    def _layout(self, feeds: dict[str, np.ndarray], staged: dict[str, np.ndarray]
                ) -> tuple[dict[str, int], int]:
        """Where each staged feed goes in the arena, and the end of the last: packed in name
        order, so a set of feed shapes (a captured CUDA graph's key) always has one layout and
        the graph replays on the addresses it was captured with."""
        key = tuple((name, feeds[name].shape, data.size) for name, data in staged.items())
        if key not in self.layouts:
            offsets, end = {}, 0
            for name in sorted(staged):
                offsets[name] = end
                end += _aligned(staged[name].size)
            if len(self.layouts) >= 256:  # dynamic steps: many shapes, each seen once
                self.layouts.clear()
            self.layouts[key] = offsets, end
        return self.layouts[key]

    def input_buffer(self, name: str) -> Buffer:
        """A buffer of its own for an input the device fills (a gather), made at first use."""
        if name not in self.buffers:
            self.buffers[name] = self.device.alloc(self.sizes[name])
        return self.buffers[name]

    def bind_pools(self, pools: DevicePools) -> None:
        """Bind the pools this graph reads, once per session (a pool never moves)."""
        session = self.active
        if id(pools) in session.pools_bound:
            return
        for name in pools.names:
            if name in self.inputs:
                self.bind_external(name, pools.shape, pools.buffers[name].ptr)
        session.pools_bound[id(pools)] = pools  # held: its id stays its own

    def bind_external(self, name: str, shape: Sequence[int], ptr: int) -> None:
        """Bind an input to memory this engine does not own (a pool, another's output)."""
        self._bind(name, shape, ptr, is_input=True)

    def bind_outputs(self, dims: dict[str, int], wanted: Sequence[str]) -> None:
        """Every output bound at the step's shape: the wanted ones, and the others the graph
        computes anyway (a binding left from an earlier step of another shape would be
        refused); those already bound at that shape are left as they are. An output whose shape
        the step's dims do not give is left to ONNX Runtime (unbound if it was bound). A step
        of the same dims and outputs as the session's last binds nothing."""
        dims_key = tuple(sorted(dims.items()))
        session = self.active
        key = (dims_key, tuple(wanted))
        if session.outputs_key == key:
            return
        shapes, unknown = self._output_shapes(dims, dims_key)
        missing = [name for name in unknown if name in wanted]
        if missing:
            shape_of(self.outputs[missing[0]].shape, dims)  # raises, naming the dim
        if any((name, False) in session.bound for name in unknown):  # no unbind for one name
            session.binding.clear_binding_outputs()
            session.bound = {k: v for k, v in session.bound.items() if k[1]}
        for name, shape in shapes.items():
            self._bind(name, shape, self.buffers[name].ptr, is_input=False)
        session.outputs_key = key

    def _output_shapes(self, dims: dict[str, int], key: tuple
                       ) -> tuple[dict[str, tuple], list[str]]:
        """The shape of every output buffer at `dims` (whose sorted items are `key`), and the
        outputs whose shape `dims` do not give; remembered per dims (a decode loop repeats a
        few)."""
        if key not in self.shape_memo:
            shapes, unknown = {}, []
            for name, spec in self.outputs.items():
                if name not in self.buffers:
                    continue
                try:
                    shapes[name] = shape_of(spec.shape, dims)
                except InvalidArgument:
                    unknown.append(name)
            if len(self.shape_memo) >= 256:  # dynamic steps: many shapes, each seen once
                self.shape_memo.clear()
            self.shape_memo[key] = (shapes, unknown)
        return self.shape_memo[key]

    def run(self, graph_key: tuple | None) -> None:
        """Run the bound step. In order on the device's stream (`in_order`), the run is only
        queued: what was staged before it is read first, and what is queued after it reads
        its outputs; else the staged inputs are waited for and the run is waited for."""
        session, options = self.active, self._options(graph_key)
        if not self.in_order:
            self.device.synchronize()  # the staged inputs (and the last commit) are in place
        self._run(session, options)

    def _options(self, graph_key: tuple | None):
        graph_id = self.active.graph_ids.get(graph_key) if self.device.ort_device == "cuda" \
            else -1
        options = self.run_options.get(graph_id)
        if options is None:
            import onnxruntime as ort

            options = ort.RunOptions()
            options.log_severity_level = QUIET
            if self.device.ort_device == "cuda":  # -1 (GraphIds.UNCAPTURED): not captured
                options.add_run_config_entry("gpu_graph_id", str(graph_id))
                if self.in_order:  # return once queued: the stream orders what follows
                    options.add_run_config_entry("disable_synchronize_execution_providers",
                                                 "1")
            self.run_options[graph_id] = options
        return options

    def _run(self, session: _Session, options) -> None:
        try:
            session.session.run_with_iobinding(session.binding, options)
        except Exception as error:  # the engine call failed: the caller poisons the batch
            raise ExecutionFailed(f"{self.path.name}: ONNX Runtime run failed: {error}") \
                from error

    def input_address(self, name: str) -> int:
        """Where input `name` is bound now (after `stage`)."""
        return self.active.bound[(name, True)][1]

    def fetch(self, name: str, dims: dict[str, int], dtype=None) -> np.ndarray:
        """An output, copied to the host at the step's shape."""
        spec = self.outputs[name]
        host = np.empty(shape_of(spec.shape, dims), dtype or spec.dtype)
        self.device.download(host, self.buffers[name])
        return host

    def _bind(self, name: str, shape, ptr: int, is_input: bool, where: str | None = None
              ) -> None:
        where = where or self.device.ort_device
        bound = (tuple(shape), ptr, where)
        if self.active.bound.get((name, is_input)) == bound:
            return
        spec = self.inputs[name] if is_input else self.outputs[name]
        element = _BF16 if spec.dtype is None else spec.dtype
        binding = self.active.binding
        bind = binding.bind_input if is_input else binding.bind_output
        bind(name, where, 0, element, list(shape), ptr)
        self.active.bound[(name, is_input)] = bound


class DevicePools(Pools):
    """Row pools in device buffers, zeroed."""

    def __init__(self, device, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                 itemsize: int) -> None:
        super().__init__(max_cells, pairs, width)
        self.device, self.row_bytes = device, width * itemsize
        self.buffers = {name: device.alloc(max_cells * self.row_bytes) for name in self.names}
        self.tables: dict[int, tuple[Buffer, Buffer]] = {}  # engine id -> pointer tables

    def tables_for(self, engine: DeviceEngine) -> tuple[Buffer, Buffer]:
        """Device arrays of the pools' and the engine's k_new/v_new addresses, in pairs."""
        if id(engine) not in self.tables:
            pools = np.array([self.buffers[n].ptr for n in self.names], np.uint64)
            news = np.array([engine.buffers[n].ptr for n in self.new_names], np.uint64)
            tables = (self.device.alloc(pools.nbytes), self.device.alloc(news.nbytes))
            self.device.upload(tables[0], pools)
            self.device.upload(tables[1], news)
            self.device.synchronize()
            self.tables[id(engine)] = tables
        return self.tables[id(engine)]


class OrtDeviceBackend(Backend):
    """ONNX Runtime with every tensor in `device` memory, bound by address.

    limits: the largest value of every dim name the artifact's graphs use (buffers are
    allocated at those); sampler: the artifact's `sample` graph, run on the device on the
    target's logits when a step draws with a temperature."""

    runs_ahead = True

    def __init__(self, name: str, device, providers: list, limits: dict[str, int],
                 policy: ShapePolicy, sampler: Path | None = None,
                 attention: str = "as-exported") -> None:
        self.name, self.device, self.providers = name, device, providers
        self.attention = attention  # how Attention nodes are rewritten: see _make_session
        self.limits, self.policy, self.sampler_path = limits, policy, sampler
        self.sampler: DeviceEngine | None = None
        # ONNX Runtime queues its runs on the device's own stream (user_compute_stream):
        # stagings, runs, commits and draws then keep their order with no wait between them
        self.in_order = any(isinstance(p, tuple) and "user_compute_stream" in p[1]
                            for p in providers)
        self.cells = device.alloc(8 * limits["S"] * limits["Q"])
        self.cells_staging = _Staging(device, 8 * limits["S"] * limits["Q"])
        self.gather_cells = device.alloc(8 * limits["S"] * limits["Q"])
        self.gather_staging = _Staging(device, 8 * limits["S"] * limits["Q"])
        self.timings: dict[str, float] = defaultdict(float)  # seconds per phase, all runs
        self.wanted_memo: dict[tuple, tuple] = {}  # see _wanted
        self.history: Buffer | None = None  # a chain's drawn tokens, [steps, rows] int64
        self.history_host: np.ndarray | None = None  # the same, page-locked on the host

    def shape_policy(self, manifest: Manifest) -> ShapePolicy:
        return self.policy

    def load_engine(self, path: Path) -> DeviceEngine:
        session = _make_session(path, self.providers, self.attention)
        wide = None
        if any(i.name == ATTN_SEQLENS for i in session.get_inputs()):
            wide = _make_session(path, self.providers, "decomposed")
        return DeviceEngine(path, session, self.device, self.limits, wide, self.in_order)

    def make_pools(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                   dtype) -> DevicePools:
        itemsize = 2 if dtype is None else np.dtype(dtype).itemsize
        return DevicePools(self.device, max_cells, pairs, width, itemsize)

    def run(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
            outputs: list[str], cells: np.ndarray | None = None,
            draws: Draws | None = None, static: bool = False,
            gather: Gather | None = None) -> dict[str, np.ndarray]:
        assert isinstance(engine, DeviceEngine)
        assert all(isinstance(p, DevicePools) for p in pools)
        clock = _Clock(self.timings)
        dims = engine.stage(feeds)
        for p in pools:
            engine.bind_pools(p)
        if gather is not None:  # pool rows into the input's buffer, device to device
            dims |= self._gather(engine, gather)
        if cells is not None:  # staged before the run: one synchronize covers both
            self._stage_cells(cells)
        is_greedy = draws is not None and draws.is_greedy
        draw_output = None if draws is None else names.GREEDY if is_greedy else names.LOGITS
        engine.bind_outputs(dims, self._wanted(outputs, pools if cells is not None else (),
                                               draw_output))
        clock.lap("stage")
        engine.run(_graph_key(feeds) if static else None)
        clock.lap("run")
        for p in pools if cells is not None else ():
            pool_table, new_table = p.tables_for(engine)
            self.device.commit(pool_table, new_table, self.cells, cells.size, p.row_bytes)
        clock.lap("commit")
        result = {name: engine.fetch(name, dims) for name in outputs}
        clock.lap("fetch")
        if draws is not None:
            result[DRAWN] = self._draw(engine, dims, draws, static, is_greedy)
            clock.lap("draw")
        return result

    def _wanted(self, outputs: list[str], committed: Sequence[Pools], draw_output: str | None
                ) -> tuple[str, ...]:
        """The outputs a run needs: those asked for, the new keys and values of the pools it
        commits, the one its draw reads; remembered (a decode loop asks the same each step)."""
        key = (tuple(outputs), tuple(id(p) for p in committed), draw_output)
        memo = self.wanted_memo.get(key)
        if memo is None:
            listed = [*outputs, *(n for p in committed for n in p.new_names), draw_output]
            memo = tuple(dict.fromkeys(n for n in listed if n is not None)), tuple(committed)
            self.wanted_memo[key] = memo  # the pools held with it: their ids stay theirs
        return memo[0]

    def _gather(self, engine: DeviceEngine, gather: Gather) -> dict[str, int]:
        """Fill `gather.name`'s buffer with the pool's rows at `gather.cells` [S, Q]; bind it
        [S, Q, width] and return its dims."""
        pools = gather.pools
        assert isinstance(pools, DevicePools)
        flat = np.ascontiguousarray(gather.cells.reshape(-1), dtype=np.int64).view(np.uint8)
        self.gather_staging.take()[: flat.size] = flat
        self.gather_staging.upload(self.gather_cells, flat.size)
        buffer = engine.input_buffer(gather.name)
        self.device.gather(buffer, pools.buffers[gather.pool], self.gather_cells,
                           gather.cells.size, pools.row_bytes)
        shape = (*gather.cells.shape, pools.width)
        engine.bind_external(gather.name, shape, buffer.ptr)
        return step_dims({gather.name: engine.inputs[gather.name].shape},
                         {gather.name: shape})

    def _stage_cells(self, cells: np.ndarray) -> None:
        flat = np.ascontiguousarray(cells.reshape(-1), dtype=np.int64).view(np.uint8)
        self.cells_staging.take()[: flat.size] = flat
        self.cells_staging.upload(self.cells, flat.size)

    def _draw(self, engine: DeviceEngine, dims: dict[str, int], draws: Draws,
              static: bool, is_greedy: bool) -> np.ndarray:
        """The drawn token of every logits row: the graph's argmax when every row is greedy,
        else the sampler graph run on the device on the engine's logits."""
        if is_greedy:
            return engine.fetch(names.GREEDY, dims)
        sample_dims = self._sample(engine, dims, draws, static)
        return self.sampler.fetch(names.TOKENS, sample_dims)

    def _sample(self, engine: DeviceEngine, dims: dict[str, int], draws: Draws,
                static: bool) -> dict[str, int]:
        """Run the sampler graph on the engine's logits; its TOKENS buffer holds the draws.
        Returns its dims."""
        if self.sampler is None:
            if self.sampler_path is None:
                raise InvalidArtifact("sampled draws on the device need the artifact's sample "
                                      "graph")
            self.sampler = self.load_engine(self.sampler_path)
        rows = dims["R"]
        vocab = engine.outputs[names.LOGITS].shape[-1]
        sample_dims = self.sampler.stage({names.PARAMS: draws.params()})
        self.sampler.bind_external(names.LOGITS, (rows, vocab), engine.buffers[names.LOGITS].ptr)
        self.sampler.bind_outputs(sample_dims, [names.TOKENS])
        self.sampler.run((("R", rows),) if static else None)
        return sample_dims

    def start_chain(self, steps: int, rows: int) -> DeviceChain:
        nbytes = 8 * steps * rows
        if self.history is None or self.history.nbytes < nbytes:
            self.history = self.device.alloc(max(nbytes, 4096))
            self.history_host = self.device.pinned(max(nbytes, 4096))
        return DeviceChain(self, rows)


class DeviceChain(Chain):
    """Decode steps queued on the device's stream, which ONNX Runtime runs on too: a step's
    staging, run, commit and draw are queued at once, and the host goes on to plan the next
    while the device works. Each step's drawn tokens go device to device into the chain's
    history (row k: step k's), from there into the next step's token input, and to
    page-locked host memory, read once the step's mark is passed. The host stays at most two
    steps ahead: a step's page-locked staging (`_Staging`) is written again two steps later."""

    def __init__(self, backend: OrtDeviceBackend, rows: int) -> None:
        self.backend, self.rows = backend, rows
        self.marks: list = []  # per step queued: passed when its tokens are on the host

    def launch(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
               cells: np.ndarray, draws: Draws, static: bool, fed_back: bool) -> None:
        assert isinstance(engine, DeviceEngine)
        backend, clock, step = self.backend, _Clock(self.backend.timings), len(self.marks)
        dims = engine.stage(feeds)  # (waits for the copy queued from its buffer two steps ago)
        for p in pools:
            engine.bind_pools(p)
        backend._stage_cells(cells)
        is_greedy = draws.is_greedy
        engine.bind_outputs(dims, backend._wanted([], pools, names.GREEDY if is_greedy
                                                  else names.LOGITS))
        if fed_back:
            backend.device.copy(engine.input_address(names.TOKENS), self._row(step - 1),
                                8 * self.rows)
        clock.lap("stage")
        engine.run(_graph_key(feeds) if static else None)
        clock.lap("run")
        for p in pools:
            pool_table, new_table = p.tables_for(engine)
            backend.device.commit(pool_table, new_table, backend.cells, cells.size, p.row_bytes)
        clock.lap("commit")
        if is_greedy:
            drawn = engine.buffers[names.GREEDY].ptr
        else:
            backend._sample(engine, dims, draws, static)
            drawn = backend.sampler.buffers[names.TOKENS].ptr
        backend.device.copy(self._row(step), drawn, 8 * self.rows)
        backend.device.download_later(self._host(step), self._row(step))
        self.marks.append(backend.device.mark())
        clock.lap("draw")

    def row(self, step: int) -> list[int]:
        self.marks[step].synchronize()
        return self._host(step).tolist()

    def tokens(self) -> np.ndarray:
        if self.marks:
            self.marks[-1].synchronize()
        host = self.backend.history_host[: 8 * self.rows * len(self.marks)]
        return host.view(np.int64).reshape(len(self.marks), self.rows).copy()

    def abandon(self) -> None:
        try:
            self.backend.device.synchronize()
        except ExecutionFailed:
            pass  # the error being raised already says what failed

    def _row(self, step: int) -> int:
        return self.backend.history.ptr + 8 * self.rows * step

    def _host(self, step: int) -> np.ndarray:
        start = 8 * self.rows * step
        return self.backend.history_host[start: start + 8 * self.rows].view(np.int64)


class _Clock:
    """Host seconds between laps, added to `totals` by phase name."""

    def __init__(self, totals: dict[str, float]) -> None:
        self.totals, self.last = totals, time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.totals[phase] += now - self.last
        self.last = now


def device_limits(manifest: Manifest, max_sessions: int) -> dict[str, int]:
    """The largest value of every dim name the graphs bind: buffers are allocated at these.
    S rows (sessions, or a static bucket), Q tokens per row, N cells per row (the context),
    R logits rows (a static piece returns every slot's; a verify every owner's block), O
    owners of a draft block, P the block rows it reads out (the proposals)."""
    target = manifest.target
    rows = max(max_sessions, target.batch_buckets[-1])
    block = manifest.draft.block_size if manifest.draft else 1
    return {"S": rows, "Q": manifest.max_step_width, "N": manifest.max_context,
            "R": rows * max(target.static_widths[-1], block), "O": rows, "P": block}


def device_policy(manifest: Manifest) -> ShapePolicy:
    """Static pieces: the manifest's static widths and batch buckets, cells read in powers of
    two from 64 up to the context."""
    target = manifest.target
    return ShapePolicy(target.static_widths, target.batch_buckets, 64, manifest.max_context)


def make_cuda_backend(folder: Path, manifest: Manifest, max_sessions: int) -> OrtDeviceBackend:
    """`ort-cuda`: ONNX Runtime's CUDA provider over PyCUDA memory, CUDA graphs per static
    shape. Says exactly what is missing when onnxruntime-gpu, PyCUDA or a GPU is not there."""
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()  # the CUDA and cuDNN libraries, before the first CUDA session
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise InvalidArgument(f"backend ort-cuda needs onnxruntime-gpu: this onnxruntime "
                              f"{ort.__version__} offers {ort.get_available_providers()}; "
                              f"{_INSTALL}")
    from cellspec.runtime.device import CudaDevice

    device = CudaDevice()
    options = dict(CUDA_PROVIDER_OPTIONS)
    if cuda_attention() == "cell":  # ONNX Runtime on PyCUDA's stream, runs queued in order
        # (with standard-op attention a CUDA graph capture on that stream failed on the H200,
        # error 901 at 4 sessions: that mode keeps the provider's own stream and waits)
        options |= {"has_user_compute_stream": "1",
                    "user_compute_stream": str(device.stream.handle)}
    providers = [("CUDAExecutionProvider", options)]
    sampler = folder / manifest.graphs["sample"] if "sample" in manifest.graphs else None
    # "decomposed" by default: standard ops give the same token alone or in a batch (greedy),
    # and with or without speculation in float32, and keep wide steps (prompts, verifies of
    # several sessions) on cuBLAS. "cell" (cellspec's CUDA ops: attention with the rotation,
    # SwiGlu) is opt-in: faster decode steps and float16 invariance, slower wide ones
    # (docs/design.md, bench/NOTES.md); "cuda"
    # (GroupQueryAttention) changed float16 tokens between a batch of 8 and each alone.
    return OrtDeviceBackend("ort-cuda", device, providers,
                            device_limits(manifest, max_sessions), device_policy(manifest),
                            sampler, cuda_attention())


def cuda_attention() -> str:
    """How `ort-cuda` runs attention: CELLSPEC_CUDA_ATTENTION, default "decomposed" (above)."""
    return os.environ.get("CELLSPEC_CUDA_ATTENTION", "decomposed")


# use_tf32 off: ONNX Runtime's CUDA provider otherwise runs float32 MatMuls on TF32 tensor
# cores (10-bit mantissa), and float32 artifacts would round differently at every step shape
# (measured on the H200: greedy tokens changed by speculation in 5% of 200 prompts, sampled 25%)
CUDA_PROVIDER_OPTIONS = {"device_id": "0", "enable_cuda_graph": "1", "use_tf32": "0"}


def _graph_key(feeds: dict[str, np.ndarray]) -> tuple:
    return tuple(sorted((name, array.shape) for name, array in feeds.items()))


# ops the CUDA provider of ONNX Runtime 1.31 has no kernel for, by input element type
CUDA_KERNEL_GAPS = {TensorProto.BFLOAT16: {"Reciprocal", "ReduceMax", "ArgMax", "CumSum"}}


def unsupported_nodes(model: onnx.ModelProto, gaps: dict[int, set[str]]) -> list[str]:
    """The nodes (name, op, input type) a provider would leave to the CPU: those whose first
    input's element type has no kernel for their op."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in (
        *inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    types |= {t.name: t.data_type for t in inferred.graph.initializer}
    found = []
    for node in inferred.graph.node:
        element = types.get(node.input[0]) if node.input else None
        if node.op_type in gaps.get(element, ()):
            found.append(f"{node.name or '(unnamed)'} ({node.op_type} on "
                         f"{TensorProto.DataType.Name(element).lower()})")
    return found


def _check_placeable(path: Path, providers: list) -> None:
    """Refuse, naming the node, a graph the CUDA provider cannot run whole: rather than let
    ONNX Runtime fall back to the CPU silently (or refuse without naming it)."""
    if providers and providers[0][0] == "CUDAExecutionProvider":
        missing = unsupported_nodes(onnx.load(str(path), load_external_data=False),
                                    CUDA_KERNEL_GAPS)
        if missing:
            raise InvalidArtifact(f"{path.name}: the CUDA provider has no kernel for node "
                                  f"{missing[0]} ({len(missing)} such nodes); export with "
                                  "--dtype float16")


# "grouped": as "cuda" for every dtype (the CPU provider's GroupQueryAttention takes float32:
# the tests check the rewrite's semantics there)
ATTENTION_MODES = ("as-exported", "cell", "cuda", "decomposed", "grouped")


def _make_session(path: Path, providers: list, attention: str = "as-exported"):
    """A session on `path`, its Attention nodes rewritten first (cellspec/rewrite.py) unless
    `attention` is "as-exported": "cuda" gives each the form the CUDA provider has a kernel
    for, "decomposed" standard ops, "cell" cellspec's CellAttention (its library built first,
    or PluginUnavailable saying what is missing). A rewritten graph is loaded from memory, its
    weights still read from the artifact's weights.bin."""
    if attention not in ATTENTION_MODES:
        raise InvalidArgument(f"attention {attention!r}: expected one of {ATTENTION_MODES}")
    if attention == "as-exported" or not path.is_file():
        return _open_session(path, providers)
    from cellspec.rewrite import attention_for_cuda, cell_attention_for_cuda, decompose_attention

    model = onnx.load(str(path), load_external_data=False)
    if not any(n.op_type == "Attention" for n in model.graph.node):
        return _open_session(path, providers)
    library = None
    if attention == "decomposed":
        model = decompose_attention(model)
    elif attention == "grouped":
        model = attention_for_cuda(model, (TensorProto.FLOAT, TensorProto.FLOAT16))
    elif attention == "cell":
        from cellspec.plugins.build import build_library

        model, library = cell_attention_for_cuda(model), build_library()
    else:
        model = attention_for_cuda(model)
    return _open_session(path, providers, model.SerializeToString(), library)


def _open_session(path: Path, providers: list, serialized: bytes | None = None,
                  library: Path | None = None):
    """A session on the graph at `path`, or on `serialized` (its rewrite) reading the weights
    beside `path`; `library`: a custom-op library its nodes call."""
    import onnxruntime as ort

    if not path.is_file():
        raise InvalidArtifact(f"{path}: graph file missing")
    _check_placeable(path, providers)
    options = ort.SessionOptions()
    if library is not None:
        options.register_custom_ops_library(str(library))
    options.log_severity_level = QUIET
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if providers != ["CPUExecutionProvider"]:  # every node on the device, or a refusal
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if serialized is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(path.parent))
    try:
        return ort.InferenceSession(serialized or str(path), options, providers=providers,
                                    disabled_optimizers=DISABLED_OPTIMIZERS)
    except Exception as error:  # ORT's own error types; it names the nodes it could not place
        raise InvalidArtifact(f"{path}: ONNX Runtime cannot load it on {providers[0]}: "
                              f"{error}") from error


def _aligned(nbytes: int, to: int = 256) -> int:
    """`nbytes` rounded up to a multiple of `to` (CUDA's allocation alignment)."""
    return -(-nbytes // to) * to


def _itemsize(spec: TensorSpec) -> int:
    return 2 if spec.dtype is None else np.dtype(spec.dtype).itemsize


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type))
