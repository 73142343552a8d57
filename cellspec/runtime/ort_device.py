"""IOBinding backends: ONNX Runtime on buffers a device owns, bound by address, never copied
whole. `ort-cuda` is this on the CUDA provider with PyCUDA memory and CUDA graphs; the tests run
it on the CPU provider over numpy memory (`HostDevice`).

Every graph output gets one buffer, allocated once at its largest shape. A step packs its host
inputs (ids, positions, cell tables, masks) into one page-locked arena, copies it to the
engine's device arena in one call, binds each input there at the step's shape, and runs
(`device_engine.py`; sessions are made in `device_sessions.py`). Pools are bound where a graph
reads them; the step's k_new/v_new stay on the device and one kernel scatters them into the
pools' cells. Static steps (padded to the shape policy's
buckets) replay one captured CUDA graph per shape (`gpu_graph_id`); the others run uncaptured.
Only what the caller asks for comes back: the drawn tokens (greedy from the graph's argmax,
or the sampler graph on the device), the taps, the proposals.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from cellspec import artifact as names
from cellspec.artifact import Manifest
from cellspec.errors import ExecutionFailed, InvalidArgument, InvalidArtifact
from cellspec.rewrite import ATTN_SEQLENS
from cellspec.runtime.backend import (
    Backend,
    Chain,
    Engine,
    Gather,
    Pools,
    TreeGrowth,
    TreeVerdict,
)
from cellspec.runtime.bindings import shape_of, step_dims
from cellspec.runtime.device import MAX_TREE_ROWS, Buffer
from cellspec.runtime.device_engine import DeviceEngine, Staging
from cellspec.runtime.device_sessions import check_modes, load_session
from cellspec.runtime.draws import DRAWN, Draws
from cellspec.runtime.planner import ShapePolicy

_INSTALL = "pip install 'cellspec[gpu]' (onnxruntime-gpu and pycuda)"


class DevicePools(Pools):
    """Row pools in device buffers, zeroed."""

    def __init__(self, device, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                 itemsize: int) -> None:
        super().__init__(max_cells, pairs, width)
        self.device, self.row_bytes = device, width * itemsize
        self.buffers = {name: device.alloc(max_cells * self.row_bytes) for name in self.names}


class _CommitTable:
    """A run's commit table on the device (CudaDevice.commit): every pair of pool and new rows
    of the pools it commits, [3, pairs] uint64 (the pools' addresses, the engine's k_new/v_new
    (or taps) addresses, the row sizes), so that one launch commits them all."""

    def __init__(self, device, engine: DeviceEngine, pools: Sequence[DevicePools]) -> None:
        entries = [(p.buffers[name].ptr, engine.buffers[new].ptr, p.row_bytes)
                   for p in pools for name, new in zip(p.names, p.new_names)]
        table = np.array(entries, np.uint64).T.copy()
        self.buffer, self.pairs = device.alloc(table.nbytes), len(entries)
        self.widest = max(p.row_bytes for p in pools)
        self.held = (engine, tuple(pools))  # their ids stay theirs while the table is kept
        device.upload(self.buffer, table)
        device.synchronize()


class OrtDeviceBackend(Backend):
    """ONNX Runtime with every tensor in `device` memory, bound by address.

    limits: the largest value of every dim name the artifact's graphs use (buffers are
    allocated at those); sampler: the artifact's `sample` graph, run on the device on the
    target's logits when a step draws with a temperature."""

    runs_ahead = True
    launches = True
    grows_trees = True

    def __init__(self, name: str, device, providers: list, limits: dict[str, int],
                 policy: ShapePolicy, sampler: Path | None = None,
                 attention: str = "as-exported", projections: str = "cublas",
                 draft_projections: str | None = None) -> None:
        self.name, self.device, self.providers = name, device, providers
        # how Attention nodes and projections are rewritten: see load_session (a draft's
        # projections: load_draft_engine)
        self.attention, self.projections = attention, projections
        self.draft_projections = projections if draft_projections is None else draft_projections
        check_modes(attention, self.draft_projections)
        self.exact_trees = attention == "cell"  # CellAttention keys new tokens by position
        self.limits, self.policy, self.sampler_path = limits, policy, sampler
        self.sampler: DeviceEngine | None = None
        # ONNX Runtime queues its runs on the device's own stream (user_compute_stream):
        # stagings, runs, commits and draws then keep their order with no wait between them
        self.in_order = any(isinstance(p, tuple) and "user_compute_stream" in p[1]
                            for p in providers)
        # (engine id, pools' ids) -> the table its runs commit those pools by
        self.commit_tables: dict[tuple, _CommitTable] = {}
        self.timings: dict[str, float] = defaultdict(float)  # seconds per phase, all runs
        self.wanted_memo: dict[tuple, tuple] = {}  # see _wanted
        self.history: Buffer | None = None  # a chain's drawn tokens, [steps, rows] int64
        self.history_host: np.ndarray | None = None  # the same, page-locked on the host
        # a run with `meanwhile` work queues its drawn tokens' copy to the host before that
        # work, so that they come back when the run ends rather than when the work does (False:
        # after it, as before 2026-12-04; benchmarks compare the two)
        self.drawn_first = True
        # _download_later's events, one per (engine, turn), each recorded again at its use
        self.copied: dict[tuple[int, int], object] = {}
        self.turns: dict[int, int] = {}  # each engine's last turn of _download_later (0, 1)
        self.pinned_views: dict = {}  # see _pinned_view
        # trees grown on the device (_grow): their record's device and page-locked memory, and
        # the event of its copy
        self.tree_record: tuple[Buffer, np.ndarray] | None = None
        self.grown = None
        # trees walked on the device (_walk): the same for each path's length and next token
        self.walk_record: tuple[Buffer, np.ndarray] | None = None
        self.walked = None
        # by engine: where its last launched run's draws are, (engine, output): its GREEDY,
        # or the sampler's TOKENS (a walk of the run's trees reads them)
        self.drawn_at: dict[int, tuple[DeviceEngine, str]] = {}
        # sampled trees grown on the device: their owners' uniforms (TreeGrowth.uniforms)
        self.tree_uniforms: tuple[Buffer, Staging] | None = None

    def shape_policy(self, manifest: Manifest, folder: Path) -> ShapePolicy:
        return self.policy

    def load_engine(self, path: Path, projections: str | None = None) -> DeviceEngine:
        session = load_session(path, self.providers, self.attention,
                               projections or self.projections)
        wide = None
        if any(i.name == ATTN_SEQLENS for i in session.get_inputs()):
            wide = load_session(path, self.providers, "decomposed")
        return DeviceEngine(path, session, self.device, self.limits, wide, self.in_order,
                            own_graphs=cuda_graphs() == "own")

    def load_draft_engine(self, path: Path) -> DeviceEngine:
        """A draft graph's engine, its projections `draft_projections` (cuda_draft_projections)."""
        return self.load_engine(path, self.draft_projections)

    def make_pools(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                   dtype) -> DevicePools:
        itemsize = 2 if dtype is None else np.dtype(dtype).itemsize
        return DevicePools(self.device, max_cells, pairs, width, itemsize)

    def run(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
            outputs: list[str], cells: np.ndarray | None = None,
            draws: Draws | None = None, static: bool = False,
            gather: Gather | None = None,
            meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        finish = self.launch(engine, pools, feeds, outputs, cells, draws, static, gather,
                             early=meanwhile is not None)
        return finish(meanwhile)

    def launch(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
               outputs: list[str], cells: np.ndarray | None = None,
               draws: Draws | None = None, static: bool = False,
               gather: Gather | None = None, early: bool = True,
               grow: TreeGrowth | None = None, walk: TreeVerdict | None = None
               ) -> Callable[[Callable[[], None] | None], dict[str, np.ndarray]]:
        """Queue what `run` runs (staging, run, commit, draw) and return the call that
        finishes it: `finish(meanwhile)` calls `meanwhile` (its runs go behind this one) and
        gives what `run` gives. `early`: the drawn tokens' copy to page-locked memory is
        queued now (`drawn_first`), so they come back when the run ends, whatever is queued
        behind it. The caller finishes before the engine (or the sampler) runs again: their
        output buffers are this run's until then; except where `finish.tokens_first` (the
        drawn tokens, all it gives, were copied early): then `meanwhile` may run it again.
        `grow`: the trees of a verify staged without them are grown on the device before it
        runs (TreeGrowth; grow.fetch is set), and
        `walk`: before that, the last verify's trees are walked into its staged anchors,
        positions, cell table and mask (TreeVerdict, as for `queue`'s block)."""
        dims = self._queue(engine, pools, feeds, outputs, cells, _draw_output(draws), static,
                           gather, grow=grow, walk=walk)
        clock = _Clock(self.timings)
        drawn = None if draws is None else self._drawn(engine, dims, draws, static, grow,
                                                       walked=walk is not None)
        if drawn is not None:  # where a walk of this run's trees finds its draws
            self.drawn_at[id(engine)] = drawn[:2]
        clock.lap("draw")
        copied = None
        if drawn is not None and early and self.drawn_first:
            source, name, source_dims = drawn
            copied = self._download_later(source, [name], source_dims)

        def finish(meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
            # (with tokens_first, `meanwhile` may run the engine again: they are copied)
            if meanwhile is not None:  # queued behind this run (where in_order) as it runs
                meanwhile()  # (its runs time their own phases)
            clock = _Clock(self.timings)
            result = {}
            if copied is not None:  # the run's tokens, without waiting for the work behind it
                result[DRAWN] = copied()[drawn[1]]
            elif drawn is not None:
                source, name, source_dims = drawn
                result[DRAWN] = source.fetch(name, source_dims)
            result |= {name: engine.fetch(name, dims) for name in outputs}
            clock.lap("fetch")
            return result

        finish.tokens_first = copied is not None and not outputs  # type: ignore[attr-defined]
        return finish

    def queue(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
              outputs: list[str], static: bool = False, walk: TreeVerdict | None = None
              ) -> Callable[[], dict[str, np.ndarray] | None]:
        """Queue a run that commits and draws nothing (a draft block); returns the call that
        fetches its `outputs`, or gives None once the engine has run again (its buffers hold
        that run's outputs then). `walk`: a verify's trees are walked on the device into the
        staged feeds before it runs (TreeVerdict; walk.fetch is set)."""
        dims = self._queue(engine, pools, feeds, outputs, None, None, static, walk=walk)
        assert isinstance(engine, DeviceEngine)
        runs = engine.runs

        def fetch() -> dict[str, np.ndarray] | None:
            if engine.runs != runs:
                return None
            copied = self._download_later(engine, outputs, dims)
            if copied is None:
                return {name: engine.fetch(name, dims) for name in outputs}
            return copied()

        return fetch

    def _download_later(self, engine: DeviceEngine, outputs: list[str], dims: dict[str, int]
                        ) -> Callable[[], dict[str, np.ndarray]] | None:
        """Queue the copies of `outputs` (of `engine` at `dims`) to page-locked memory, and
        return the call that waits for them all at once (one event) and gives them; None where
        a shape has no page-locked view (see _pinned_view: the caller fetches as usual)."""
        # two turns per engine, each with its own memory and event: a verify's tokens can be
        # on their way while the next verify, queued behind it, copies its own
        turn = self.turns[id(engine)] = self.turns.get(id(engine), 0) ^ 1
        hosts = {name: self._pinned_view(engine, name, dims, turn) for name in outputs}
        if any(host is None for host in hosts.values()):
            return None
        for name, host in hosts.items():
            self.device.download_later(host, engine.buffers[name].ptr)
        # one event per turn, recorded again each time: a copy is waited for before the one
        # two turns later
        key = (id(engine), turn)
        self.copied[key] = done = self.device.mark(self.copied.get(key))

        def wait() -> dict[str, np.ndarray]:
            done.synchronize()
            return {name: host.copy() for name, host in hosts.items()}

        return wait

    def _pinned_view(self, engine: DeviceEngine, name: str, dims: dict[str, int], turn: int
                     ) -> np.ndarray | None:
        """Page-locked memory of output `name`'s shape and type at `dims`, one per (engine,
        output, shape, turn), kept: a verify's and a queued block's few shapes repeat. None
        past PINNED_VIEWS of them (many shapes, each seen once: the caller fetches as
        usual)."""
        spec = engine.outputs[name]
        shape = shape_of(spec.shape, dims)
        key = (id(engine), name, shape, turn)
        view = self.pinned_views.get(key)
        if view is None:
            if len(self.pinned_views) >= PINNED_VIEWS:
                return None
            nbytes = int(np.prod(shape)) * np.dtype(spec.dtype).itemsize
            view = (self.device.pinned(nbytes)[:nbytes].view(spec.dtype).reshape(shape),
                    engine)  # the engine held: its id stays its own
            self.pinned_views[key] = view
        return view[0]

    def _queue(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
               outputs: list[str], cells: np.ndarray | None, draw_output: str | None,
               static: bool, gather: Gather | None = None,
               tokens_from: tuple[int, int] | None = None,
               grow: TreeGrowth | None = None,
               walk: TreeVerdict | None = None) -> dict[str, int]:
        """Stage the feeds, bind, run, and commit each pool's new rows at `cells`: queued on the
        device's stream where the backend is `in_order`, else waited for. tokens_from (address,
        bytes): the start of the token input is copied from there, device to device, after the
        staging (a chain step's tokens, drawn by the step before). walk, then grow: the tree
        kernels rewrite staged inputs between the staging and the run (launch, queue). Returns
        the step's dims."""
        assert isinstance(engine, DeviceEngine)
        assert all(isinstance(p, DevicePools) for p in pools)
        clock = _Clock(self.timings)
        lists = {}  # cell lists staged with the feeds, in the same copy
        if cells is not None:
            lists[_COMMITTED] = cells
        if gather is not None:
            lists[_GATHERED] = gather.cells
        dims = engine.stage(feeds, static, lists)
        for p in pools:
            engine.bind_pools(p)
        if gather is not None:  # pool rows into the input's buffer, device to device
            dims |= self._gather(engine, gather)
        engine.bind_outputs(dims, self._wanted(outputs, pools if cells is not None else (),
                                               draw_output))
        if tokens_from is not None:
            self.device.copy(engine.input_address(names.TOKENS), *tokens_from)
        if walk is not None:  # (before a growth: that writes the record the walk reads)
            walk.fetch = self._walk(engine, walk)
        if grow is not None:
            grow.fetch = self._grow(engine, grow)
        clock.lap("stage")
        engine.run(engine.step_key if static else None)
        clock.lap("run")
        if cells is not None and pools:  # every pool's rows in one launch
            table = self._commit_table(engine, pools)
            self.device.commit(table.buffer, table.pairs, engine.cell_list(_COMMITTED),
                               cells.size, table.widest)
        clock.lap("commit")
        return dims

    def _commit_table(self, engine: DeviceEngine, pools: Sequence[DevicePools]) -> _CommitTable:
        """The table `engine`'s runs commit `pools` by, made at its first use and kept."""
        key = (id(engine), *(id(p) for p in pools))
        table = self.commit_tables.get(key)
        if table is None:
            table = self.commit_tables[key] = _CommitTable(self.device, engine, pools)
        return table

    def _grow(self, engine: DeviceEngine, grow: TreeGrowth) -> Callable[[], np.ndarray]:
        """Queue the trees' growth into `engine`'s staged verify inputs and the copy of their
        record to page-locked memory; returns the call that waits for it (one event, recorded
        again each time) and gives the record."""
        if not 1 <= grow.nodes < MAX_TREE_ROWS:
            raise InvalidArgument(f"trees of {grow.nodes} nodes: the device grows at most "
                                  f"{MAX_TREE_ROWS - 1}")
        width, keys = _mask_width_keys(engine)
        rows = grow.nodes + 1
        nbytes = 24 * grow.owners * rows
        if self.tree_record is None:
            self.tree_record = self._record_memory(24 * MAX_TREE_ROWS)
        record, pinned = self.tree_record
        self.device.grow_trees(grow.block.buffers[names.TOP_IDS].ptr,
                               grow.block.buffers[names.TOP_LOGP].ptr, grow.owners,
                               grow.depth_limit, names.TOP_K, grow.nodes,
                               engine.input_address(names.TOKENS),
                               engine.input_address(names.POSITIONS),
                               engine.input_address(names.ATTN_MASK), width, keys, keys - width,
                               record.ptr, grow.choices)
        host = pinned[:nbytes].view(np.int64).reshape(grow.owners, 3, rows)
        self.grown, fetch = self._record_later(host, record, self.grown)
        return fetch

    def _walk(self, engine: DeviceEngine, verdict: TreeVerdict
              ) -> Callable[[], np.ndarray] | None:
        """Queue the walk of the trees last grown here (their record) by the verify's draws
        into `engine`'s staged block inputs, and where `verdict.fetched` the copy of each path's
        length and next token to page-locked memory; returns the call that waits for it and
        gives them (None where not fetched)."""
        assert self.tree_record is not None, "a walk of trees grown on the device"
        assert isinstance(verdict.verify, DeviceEngine)
        width, keys = _mask_width_keys(engine)
        if self.walk_record is None:
            self.walk_record = self._record_memory(16)
        record, pinned = self.walk_record
        source, name = self.drawn_at[id(verdict.verify)]  # its GREEDY, or the sampler's
        self.device.walk_trees(source.buffers[name].ptr, verdict.stride,
                               self.tree_record[0].ptr, verdict.owners, verdict.rows,
                               engine.input_address(names.TOKENS),
                               engine.input_address(names.POSITIONS),
                               engine.input_address(names.CELL_TABLE),
                               engine.input_address(names.ATTN_MASK), width, keys - width,
                               record.ptr)
        if not verdict.fetched:  # (its result is the one a walk of the same trees gave)
            return None
        host = pinned[: 16 * verdict.owners].view(np.int64).reshape(verdict.owners, 2)
        self.walked, fetch = self._record_later(host, record, self.walked)
        return fetch

    def _record_memory(self, owner_bytes: int) -> tuple[Buffer, np.ndarray]:
        """Device memory for a tree kernel's record of `owner_bytes` an owner, for as many
        owners as a step holds, and page-locked memory to copy it to (each kernel's, at its
        first use, kept)."""
        size = owner_bytes * self.limits["S"]
        return self.device.alloc(size), self.device.pinned(size)

    def _record_later(self, host: np.ndarray, record: Buffer, event
                      ) -> tuple[object, Callable[[], np.ndarray]]:
        """Queue the copy of a tree kernel's `record` to page-locked `host` and mark it (with
        `event` recorded again, where given: nobody waits for its last use any more); returns
        the mark and the call that waits for it and gives a copy of `host`."""
        self.device.download_later(host, record.ptr)
        done = self.device.mark(event)

        def fetch() -> np.ndarray:
            done.synchronize()
            return host.copy()

        return done, fetch

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
        buffer = engine.input_buffer(gather.name)
        self.device.gather(buffer, pools.buffers[gather.pool], engine.cell_list(_GATHERED),
                           gather.cells.size, pools.row_bytes)
        shape = (*gather.cells.shape, pools.width)
        engine.bind_external(gather.name, shape, buffer.ptr)
        return step_dims({gather.name: engine.inputs[gather.name].shape},
                         {gather.name: shape})

    def _drawn(self, engine: DeviceEngine, dims: dict[str, int], draws: Draws,
               static: bool, grow: TreeGrowth | None = None, walked: bool = False
               ) -> tuple[DeviceEngine, str, dict[str, int]]:
        """Where the drawn token of every logits row is, as (engine, output, its dims): the
        graph's argmax when every row is greedy, else the TOKENS of the sampler graph, run here
        on the device on the engine's logits. `grow`: the run's trees grew on the device: each
        tree row first takes its position's uniform from grow.uniforms (`walked`: past the
        path the walk before the run accepted)."""
        if draws.is_greedy:
            return engine, names.GREEDY, dims
        if self.sampler is None:
            if self.sampler_path is None:
                raise InvalidArtifact("sampled draws on the device need the artifact's sample "
                                      "graph")
            self.sampler = self.load_engine(self.sampler_path)
        rows = dims["R"]
        vocab = engine.outputs[names.LOGITS].shape[-1]
        sample_dims = self.sampler.stage({names.PARAMS: draws.params()})
        if grow is not None:
            assert self.tree_record is not None and grow.uniforms is not None
            if self.tree_uniforms is None:
                size = 4 * self.limits["S"] * 2 * MAX_TREE_ROWS
                self.tree_uniforms = self.device.alloc(size), Staging(self.device, size)
            buffer, staging = self.tree_uniforms
            _upload_as(staging, buffer, grow.uniforms, np.float32)
            assert self.walk_record is not None or not walked
            self.device.tree_uniforms(self.sampler.input_address(names.PARAMS),
                                      self.tree_record[0].ptr, buffer.ptr, grow.uniforms.shape[1],
                                      self.walk_record[0].ptr if walked else 0, grow.owners,
                                      grow.nodes + 1, grow.stride)
        self.sampler.bind_external(names.LOGITS, (rows, vocab), engine.buffers[names.LOGITS].ptr)
        self.sampler.bind_outputs(sample_dims, [names.TOKENS])
        self.sampler.run((("R", rows),) if static else None)
        return self.sampler, names.TOKENS, sample_dims

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
    steps ahead: a step's page-locked staging (`Staging`) is written again two steps later."""

    def __init__(self, backend: OrtDeviceBackend, rows: int) -> None:
        self.backend, self.rows = backend, rows
        self.marks: list = []  # per step queued: passed when its tokens are on the host

    def launch(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
               cells: np.ndarray, draws: Draws, static: bool, fed_back: bool) -> None:
        backend, step = self.backend, len(self.marks)
        tokens_from = (self._row(step - 1), 8 * self.rows) if fed_back else None
        # (staging waits for the copy queued from its buffer two steps ago)
        dims = backend._queue(engine, pools, feeds, [], cells, _draw_output(draws), static,
                              tokens_from=tokens_from)
        clock = _Clock(backend.timings)
        source, name, _ = backend._drawn(engine, dims, draws, static)
        backend.device.copy(self._row(step), source.buffers[name].ptr, 8 * self.rows)
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


PINNED_VIEWS = 64  # page-locked output views kept (OrtDeviceBackend._pinned_view)
# the cell lists a run stages with its feeds (DeviceEngine.stage): the cells it commits, the
# cells its gather reads
_COMMITTED, _GATHERED = "committed", "gathered"


def _draw_output(draws: Draws | None) -> str | None:
    """The engine output a step's draws read: the argmax when every row is greedy, else the
    logits (for the sampler graph); None without draws."""
    if draws is None:
        return None
    return names.GREEDY if draws.is_greedy else names.LOGITS


def _mask_width_keys(engine: DeviceEngine) -> tuple[int, int]:
    """The rows (Q) and keys (N + Q) of the attention mask staged for `engine`'s run, [S, 1,
    Q, N + Q]: the tree kernels address its rows by them."""
    shape = engine.active.current.bound[(names.ATTN_MASK, True)][0]
    return shape[2], shape[3]


def _upload_as(staging: Staging, buffer: Buffer, array: np.ndarray, dtype) -> None:
    """Queue the copy of `array` as `dtype` to `buffer`, through the next of `staging`'s
    turns."""
    flat = np.ascontiguousarray(array.reshape(-1), dtype=dtype).view(np.uint8)
    staging.take()[: flat.size] = flat
    staging.upload(buffer, flat.size)


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
    options, attention = dict(CUDA_PROVIDER_OPTIONS), cuda_attention()
    if attention == "cell":  # ONNX Runtime on PyCUDA's stream, runs queued in order
        # (with standard-op attention a CUDA graph capture on that stream failed on the H200,
        # error 901 at 4 sessions: that mode keeps the provider's own stream and waits)
        options |= {"has_user_compute_stream": "1",
                    "user_compute_stream": str(device.stream.handle)}
    providers = [("CUDAExecutionProvider", options)]
    sampler = folder / manifest.graphs["sample"] if "sample" in manifest.graphs else None
    # "cell" by default where its library builds (cuda_attention): cellspec's CUDA ops
    # (attention with the rotation, SwiGlu, RowMatMul) decode faster and keep float16 tokens
    # the same alone and in a batch; "decomposed" (standard ops) keeps long prompts on cuBLAS
    # but rounds float16 by a step's shape (docs/design.md, bench/NOTES.md); "cuda"
    # (GroupQueryAttention) changed float16 tokens between a batch of 8 and each alone.
    return OrtDeviceBackend("ort-cuda", device, providers,
                            device_limits(manifest, max_sessions), device_policy(manifest),
                            sampler, attention, cuda_projections(attention),
                            cuda_draft_projections(attention))


def cuda_attention() -> str:
    """How `ort-cuda` runs attention: CELLSPEC_CUDA_ATTENTION where set, else default_attention().
    """
    return os.environ.get("CELLSPEC_CUDA_ATTENTION") or default_attention()


@functools.cache
def default_attention() -> str:
    """"cell" where cellspec's CUDA library is built or can be built now (plugins/build.py:
    nvcc and ONNX Runtime's C++ headers; the build says on stderr how long it takes, once per
    source), else "decomposed", saying once on stderr what is missing. Without PyCUDA
    "decomposed", silently: loading `ort-cuda` then says what to install."""
    from cellspec.plugins.build import PluginUnavailable, build_library

    if not _has_pycuda():
        return "decomposed"
    try:
        build_library()
    except PluginUnavailable as missing:
        reason = str(missing).splitlines()[0].rstrip(":")
        print(f"cellspec: ort-cuda runs attention as standard ops, since cellspec's CUDA "
              f"library cannot be built here: {reason} (`python -m cellspec.plugins.build` "
              f"says it all; with the library float16 decodes faster and the same alone and "
              f"in a batch; CELLSPEC_CUDA_ATTENTION=decomposed chooses standard ops without "
              f"this note)", file=sys.stderr)
        return "decomposed"
    return "cell"


def _has_pycuda() -> bool:
    import importlib.util

    return importlib.util.find_spec("pycuda") is not None


GRAPH_MODES = ("ort", "own")


def cuda_graphs() -> str:
    """Whose CUDA graphs `ort-cuda`'s static steps replay: CELLSPEC_CUDA_GRAPHS, else "ort".
    "ort": ONNX Runtime's own (`gpu_graph_id`), replayed by a run call; "own": the engine's,
    ONNX Runtime's run captured around it by the device's stream capture and launched in one
    driver call (DeviceEngine.run; where the runs are queued in order, as with CellAttention)."""
    mode = os.environ.get("CELLSPEC_CUDA_GRAPHS", "ort")
    if mode not in GRAPH_MODES:
        raise InvalidArgument(f"CELLSPEC_CUDA_GRAPHS={mode!r}: one of {', '.join(GRAPH_MODES)}")
    return mode


def cuda_projections(attention: str) -> str:
    """How `ort-cuda` runs the float16/bfloat16 projections under `attention`:
    CELLSPEC_CUDA_PROJECTIONS, else "row" with CellAttention (its library's RowMatMul, on the
    tensor cores, a row's rounding independent of the batch: decode steps faster than cuBLAS's
    on the H200, prompts slower) and "cublas" (ONNX Runtime's MatMuls) otherwise, the only
    choice there (device_sessions.PROJECTION_MODES)."""
    default = "row" if attention == "cell" else "cublas"
    return os.environ.get("CELLSPEC_CUDA_PROJECTIONS", default)


def cuda_draft_projections(attention: str) -> str:
    """How `ort-cuda` runs a DFlash draft's float16/bfloat16 projections (its context and block
    graphs): CELLSPEC_CUDA_DRAFT_PROJECTIONS, else the target's (cuda_projections). A draft's
    rounding need not be the same alone and in a batch: each proposal is checked against the
    target's own draw, so it changes how many tokens a cycle keeps, never which (the text equal
    to plain decoding's on the H200, tests/gpu). "cublas": ONNX Runtime's MatMuls for the
    draft, which on the H200 project 16 rows of Qwen3-8B's qkv and gate/up 1.4-1.8x faster
    than RowMatMul, SmolLM2's slower (bench/NOTES.md, 2026-12-04, third sitting); opt-in, since
    on a DFlash cycle over Qwen3-8B's shape it saved 0.06 ms of 9.5 (an H100, 2026-12-05,
    nineteenth sitting: RowMatMul is faster on the draft's head)."""
    return os.environ.get("CELLSPEC_CUDA_DRAFT_PROJECTIONS", cuda_projections(attention))


# use_tf32 off: ONNX Runtime's CUDA provider otherwise runs float32 MatMuls on TF32 tensor
# cores (10-bit mantissa), and float32 artifacts would round differently at every step shape
# (measured on the H200: greedy tokens changed by speculation in 5% of 200 prompts, sampled 25%)
CUDA_PROVIDER_OPTIONS = {"device_id": "0", "enable_cuda_graph": "1", "use_tf32": "0"}


# ops the CUDA provider of ONNX Runtime 1.31 has no kernel for, by input element type
