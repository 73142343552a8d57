"""One ONNX Runtime graph on IOBinding over device buffers (`DeviceEngine`): a buffer per input
and output at its largest shape, a step's host inputs packed into one page-locked arena and copied
in one call, inputs bound by address, one CUDA graph per static shape. `Staging` is the
page-locked memory such copies are queued from."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cellspec import artifact as names
from cellspec.errors import ExecutionFailed, InvalidArgument
from cellspec.rewrite import HOST_INPUTS
from cellspec.runtime.backend import Engine, Pools, TensorSpec
from cellspec.runtime.bindings import GraphIds, shape_of, step_dims
from cellspec.runtime.device import Buffer
from cellspec.runtime.device_sessions import QUIET

if TYPE_CHECKING:
    from cellspec.runtime.ort_device import DevicePools

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
              "tensor(bfloat16)": None}
_BF16 = 16  # onnx.TensorProto.BFLOAT16: numpy has no bfloat16, bind it by its ONNX type


class Staging:
    """Page-locked host buffers, used in turns, for copies to the device that are queued and
    not waited for: a buffer is written again only once the copy queued from it last has run
    (its mark is passed). Runs on the device's stream do not wait for their inputs' copies, so
    three pieces in a row (a long drain) would otherwise overwrite a copy still queued."""

    def __init__(self, device, nbytes: int, count: int = 2) -> None:
        self.device, self.turn = device, 0
        self.buffers = [device.pinned(nbytes) for _ in range(count)]
        self.marks: list = [None] * count  # each buffer's event, recorded again at each copy
        self.pending = [False] * count  # whether a copy from it may still be queued

    def take(self) -> np.ndarray:
        """The next buffer, free to write."""
        self.turn = (self.turn + 1) % len(self.buffers)
        if self.pending[self.turn]:
            self.marks[self.turn].synchronize()
            self.pending[self.turn] = False
        return self.buffers[self.turn]

    def upload(self, buffer: Buffer, nbytes: int) -> None:
        """Queue the copy of the taken buffer's first `nbytes` to `buffer`."""
        self.device.upload(buffer, self.buffers[self.turn][:nbytes])
        self.marks[self.turn] = self.device.mark(self.marks[self.turn])
        self.pending[self.turn] = True


class _Binding:
    """One IOBinding of a session and what it binds now."""

    def __init__(self, session) -> None:
        self.binding = session.io_binding()
        # (name, is_input) -> (shape, address, where) as bound now: a binding stays until it
        # changes, so a step rebinds only what moved (a pool or a buffer is bound once)
        self.bound: dict[tuple[str, bool], tuple] = {}
        self.pools_bound: dict[int, Pools] = {}  # pools bound as inputs (they never move)
        self.outputs_key: tuple | None = None  # (dims, wanted) of the outputs as bound now
        self.staged: tuple | None = None  # the layout its staged inputs are bound at now
        self.version = 0  # counts changes to what is bound (an own graph's capture holds one)

    def captures_all(self, outputs, host_inputs) -> bool:
        """Whether a run on this binding can be an own CUDA graph: every output in memory of
        the engine's (none left to ONNX Runtime, which allocates those at each run) and no
        input of `host_inputs` (read by the provider on the host) bound."""
        return (all((name, False) in self.bound for name in outputs)
                and not any((name, True) in self.bound for name in host_inputs))


class _OwnGraph:
    """A static step's own CUDA graph (DeviceEngine.run): captured from ONNX Runtime's run on
    one binding as it stood (its version), after WARM_RUNS uncaptured runs of it."""

    WARM_RUNS = 2  # as ONNX Runtime does before it captures: its memory arena has grown by then
    MAX_CAPTURES = 4  # a step whose binding keeps changing goes back to ONNX Runtime's graph

    def __init__(self, binding: _Binding, captures: int = 0) -> None:
        self.binding, self.version = binding, binding.version
        self.runs = 0  # uncaptured runs so far
        self.graph = None  # the device's CudaGraph, once captured
        self.captures = captures  # of this step's graph id, this one's included once made
        self.refused = captures >= self.MAX_CAPTURES  # ONNX Runtime's own graph instead

    def holds(self, binding: _Binding) -> bool:
        return self.binding is binding and self.version == binding.version


class _Session:
    """An ONNX Runtime session, an IOBinding per layout of a static step's staged feeds (the
    last MAX_BINDINGS used) and one shared by dynamic steps, and the CUDA graphs it captured.
    A step binds on its layout's IOBinding (`select`), so static steps that alternate shapes (a
    prompt's prefill, then decode steps or verifies; verifies of one and of two sessions) find
    everything bound as their shape's last step left it, where one IOBinding rebound every
    output (60-70 for SmolLM2) at each change of shape. Dynamic steps (a prompt's width, rarely
    seen twice) share one, which keeps the pools bound and rebinds what their shape moves."""

    MAX_BINDINGS = 32

    def __init__(self, session) -> None:
        self.session, self.graph_ids = session, GraphIds()
        self.own: dict[int, _OwnGraph] = {}  # graph id -> its own graph (DeviceEngine.run)
        self.inputs = {i.name for i in session.get_inputs()}
        self.bindings: OrderedDict[tuple, _Binding] = OrderedDict()  # static layouts
        self.current = self.dynamic = _Binding(session)

    def select(self, layout: tuple | None) -> None:
        """Bind on `layout`'s IOBinding from now on (made at its first use; the least recently
        used one dropped past MAX_BINDINGS), or for None (a dynamic step) on the shared one."""
        if layout is None:
            self.current = self.dynamic
            return
        current = self.bindings.get(layout)
        if current is None:
            if len(self.bindings) >= self.MAX_BINDINGS:
                self.bindings.popitem(last=False)
            current = self.bindings[layout] = _Binding(self.session)
        else:
            self.bindings.move_to_end(layout)
        self.current = current


class DeviceEngine(Engine):
    """One graph on IOBinding sessions: a buffer per input and output at its largest shape
    (pools excepted: they are bound where they live), and a CUDA graph per static shape.

    `wide`: a second session of the same graph for pieces of several rows of several tokens,
    which GroupQueryAttention refuses ("batch_size must be 1 when sequence_length > 1 and past
    context is given"); the buffers are the engine's, shared."""

    def __init__(self, path: Path, session, device, limits: dict[str, int],
                 wide=None, in_order: bool = False, own_graphs: bool = False) -> None:
        self.path, self.device, self.in_order = path, device, in_order
        # static steps replayed as CUDA graphs of the engine's own (see run): where the runs
        # are queued in order on the device's stream and the device can capture
        self.own_graphs = own_graphs and in_order and device.captures
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
        self.dims_memo: dict[tuple, dict[str, int]] = {}  # feeds' shapes -> dims (see stage)
        # the staged step's feeds (names, shapes, dtypes) and session: a static step's CUDA
        # graph key
        self.step_key: tuple | None = None
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
        # a step's host feeds, packed, and after them its cell lists (stage's `cells`): one
        # copy to the device per step, not one per input
        arena += SIDE_LISTS * _aligned(8 * limits["S"] * limits["Q"])
        self.arena, self.staging = device.alloc(arena), Staging(device, arena)
        self.cell_lists: dict[str, int] = {}  # the staged step's cell lists' addresses
        self.layouts: dict[tuple, tuple[dict[str, int], int]] = {}  # see _layout
        self.runs = 0  # runs so far: an output fetched later is the run's while this stays

    @property
    def graph_ids(self) -> GraphIds:
        return self.main.graph_ids

    def stage(self, feeds: dict[str, np.ndarray], static: bool = True,
              cells: dict[str, np.ndarray] | None = None) -> dict[str, int]:
        """Choose the session for the step's shape, copy the host feeds it reads into their
        buffers (async) and bind them (`static`: on the IOBinding of the feeds' layout, else on
        the one dynamic steps share); returns the dim values. `cells`: lists of cells (at most
        SIDE_LISTS, each at most S x Q) the device's own kernels read around the run (the
        cells it commits, those it gathers), copied as int64 after the feeds in the same copy;
        `cell_list(name)` says where."""
        key = tuple([(name, array.shape, array.dtype.num) for name, array in feeds.items()])
        dims = self.dims_memo.get(key)
        if dims is None:
            dims = step_dims(self.input_dims, {name: shape for name, shape, _ in key})
            if len(self.dims_memo) >= 256:  # dynamic steps: many shapes, each seen once
                self.dims_memo.clear()
            self.dims_memo[key] = dims
        dims = dict(dims)  # the caller's to extend
        is_wide = dims.get("S", dims.get("O", 1)) > 1 and dims.get("Q", 1) > 1
        self.active = session = self.wide if is_wide and self.wide else self.main
        layout = self.step_key = (key, session is self.wide)
        session.select(layout if static else None)
        current = session.current
        staged = {}
        for name, array in feeds.items():
            if name not in session.inputs:
                continue
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            if name in self.host:  # read by the provider on the host: bound there
                self.host[name][: array.nbytes] = _flat_bytes(array)
                self._bind(name, array.shape, self.host[name].ctypes.data, True, "cpu")
            else:
                staged[name] = array
        offsets, end = self._layout(layout, staged)
        self.cell_lists = {}
        if staged or cells:
            arena_host = memoryview(self.staging.take())
            for name, array in staged.items():
                if array.nbytes:
                    start = offsets[name]
                    arena_host[start: start + array.nbytes] = _flat_bytes(array)
            for name, array in (cells or {}).items():  # (not bound: only read by address)
                flat = _flat_bytes(np.ascontiguousarray(array, np.int64))
                assert len(self.cell_lists) < SIDE_LISTS and end + flat.nbytes <= \
                    self.arena.nbytes, "at most SIDE_LISTS lists of S x Q cells"
                arena_host[end: end + flat.nbytes] = flat
                self.cell_lists[name] = self.arena.ptr + end
                end += _aligned(flat.nbytes)
            self.staging.upload(self.arena, end)
        if current.staged != layout:  # else bound as this layout's last step bound them
            for name in staged:
                self._bind(name, feeds[name].shape, self.arena.ptr + offsets[name],
                           is_input=True)
            current.staged = layout
        return dims

    def _layout(self, key: tuple, staged: dict[str, np.ndarray]) -> tuple[dict[str, int], int]:
        """Where each staged feed goes in the arena, and the end of the last: packed in name
        order, so a set of feed shapes (`key`; a captured CUDA graph's key) always has one
        layout and the graph replays on the addresses it was captured with."""
        if key not in self.layouts:
            offsets, end = {}, 0
            for name in sorted(staged):
                offsets[name] = end
                end += _aligned(staged[name].nbytes)
            if len(self.layouts) >= 256:  # dynamic steps: many shapes, each seen once
                self.layouts.clear()
            self.layouts[key] = offsets, end
        return self.layouts[key]

    def cell_list(self, name: str) -> int:
        """Where the staged step's cell list `name` (stage's `cells`) is on the device."""
        return self.cell_lists[name]

    def input_buffer(self, name: str) -> Buffer:
        """A buffer of its own for an input the device fills (a gather), made at first use."""
        if name not in self.buffers:
            self.buffers[name] = self.device.alloc(self.sizes[name])
        return self.buffers[name]

    def bind_pools(self, pools: DevicePools) -> None:
        """Bind the pools this graph reads, once per IOBinding (a pool never moves)."""
        current = self.active.current
        if id(pools) in current.pools_bound:
            return
        for name in pools.names:
            if name in self.inputs:
                self.bind_external(name, pools.shape, pools.buffers[name].ptr)
        current.pools_bound[id(pools)] = pools  # held: its id stays its own

    def bind_external(self, name: str, shape: Sequence[int], ptr: int) -> None:
        """Bind an input to memory this engine does not own (a pool, another's output)."""
        self._bind(name, shape, ptr, is_input=True)

    def bind_outputs(self, dims: dict[str, int], wanted: Sequence[str]) -> None:
        """Every output bound at the step's shape: the wanted ones, and the others the graph
        computes anyway (a binding left from an earlier step of another shape would be
        refused); those already bound at that shape are left as they are. An output whose shape
        the step's dims do not give is left to ONNX Runtime (unbound if it was bound). A step
        of the same dims and outputs as its layout's last (see _Session) binds nothing."""
        dims_key = tuple(sorted(dims.items()))
        current = self.active.current
        key = (dims_key, tuple(wanted))
        if current.outputs_key == key:
            return
        shapes, unknown = self._output_shapes(dims, dims_key)
        missing = [name for name in unknown if name in wanted]
        if missing:
            shape_of(self.outputs[missing[0]].shape, dims)  # raises, naming the dim
        if any((name, False) in current.bound for name in unknown):  # no unbind for one name
            current.binding.clear_binding_outputs()
            current.bound = {k: v for k, v in current.bound.items() if k[1]}
            current.version += 1
        for name, shape in shapes.items():
            self._bind(name, shape, self.buffers[name].ptr, is_input=False)
        current.outputs_key = key

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
        session = self.active
        self.runs += 1
        if not self.in_order:
            self.device.synchronize()  # the staged inputs (and the last commit) are in place
        if self.own_graphs and graph_key is not None and self._run_own(session, graph_key):
            return
        self._run(session, self._options(graph_key))

    def _run_own(self, session: _Session, graph_key: tuple) -> bool:
        """Run the bound static step as a CUDA graph of the engine's own (`own_graphs`): ONNX
        Runtime's run captured by the device's stream capture around it, then launched in one
        driver call, where replaying ONNX Runtime's own graph (`gpu_graph_id`) costs the host a
        run call that checks every bound input and output (16-24 us a run for SmolLM2's 65 and
        63 on an H100's host, against 9-12 us a launch; no round was faster for it, since a
        round waits for the device: bench/NOTES.md, 2026-12-07, sixteenth sitting; opt-in,
        `ort_device.cuda_graphs`). Its first WARM_RUNS runs on a binding
        go uncaptured; a change to the binding (`_Binding.version`) captures again. False where
        the step is not for an own graph (past GraphIds' limit, an output left to ONNX Runtime,
        a host input, a failed capture): the caller runs it as before."""
        graph_id = session.graph_ids.get(graph_key)
        if graph_id == GraphIds.UNCAPTURED:
            return False
        current = session.current
        own = session.own.get(graph_id)
        if own is None or not own.holds(current):
            own = session.own[graph_id] = _OwnGraph(current, 0 if own is None else own.captures)
        if own.refused:
            return False
        if own.graph is None:
            uncaptured = self._options(None)
            if own.runs < own.WARM_RUNS:
                own.runs += 1
                self._run(session, uncaptured)
                return True
            if current.captures_all(self.outputs, self.host):
                own.captures += 1
                own.graph = self.device.capture(lambda: self._run(session, uncaptured))
            if own.graph is None:
                own.refused = True
                return False
        own.graph.launch()
        return True

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
            session.session.run_with_iobinding(session.current.binding, options)
        except Exception as error:  # the engine call failed: the caller poisons the batch
            raise ExecutionFailed(f"{self.path.name}: ONNX Runtime run failed: {error}") \
                from error

    def input_address(self, name: str) -> int:
        """Where input `name` is bound now (after `stage`)."""
        return self.active.current.bound[(name, True)][1]

    def fetch(self, name: str, dims: dict[str, int], dtype=None) -> np.ndarray:
        """An output, copied to the host at the step's shape."""
        spec = self.outputs[name]
        host = np.empty(shape_of(spec.shape, dims), dtype or spec.dtype)
        self.device.download(host, self.buffers[name])
        return host

    def _bind(self, name: str, shape, ptr: int, is_input: bool, where: str | None = None
              ) -> None:
        where = where or self.device.ort_device
        bound, current = (tuple(shape), ptr, where), self.active.current
        if current.bound.get((name, is_input)) == bound:
            return
        spec = self.inputs[name] if is_input else self.outputs[name]
        element = _BF16 if spec.dtype is None else spec.dtype
        bind = current.binding.bind_input if is_input else current.binding.bind_output
        bind(name, where, 0, element, list(shape), ptr)
        current.bound[(name, is_input)] = bound
        current.version += 1


SIDE_LISTS = 2  # cell lists a step stages with its feeds (the cells it commits, it gathers)


def _flat_bytes(array: np.ndarray):
    """A C-contiguous array's bytes, flat: a memoryview (cheaper on the host than numpy's
    reshape and view), or numpy's uint8 view for a dtype the buffer protocol cannot export
    (ml_dtypes' bfloat16, say)."""
    flat = array.reshape(-1)  # (a size-1 dim's stride may be 0, which memoryview refuses)
    try:
        return memoryview(flat).cast("B")
    except (TypeError, ValueError):
        return flat.view(np.uint8)


def _aligned(nbytes: int, to: int = 256) -> int:
    """`nbytes` rounded up to a multiple of `to` (CUDA's allocation alignment)."""
    return -(-nbytes // to) * to


def _itemsize(spec: TensorSpec) -> int:
    return 2 if spec.dtype is None else np.dtype(spec.dtype).itemsize


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type))
