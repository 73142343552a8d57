"""The engine seam: a backend owns its engines and its KV pools and commits new keys/values.

An **engine** is one graph of an artifact loaded on a backend, its tensors bound by name. A
backend also owns the KV pools of each cell cache (one key and one value pool per layer,
[max_cells, KV * D]) and commits a step's new keys and values into them itself: with numpy on
the CPU, in place on a device. The models above (target, draft) only plan a step (the cell
cache), `run` it here, and commit the plan to the cache; they never touch a pool.

A backend also says how it pads a step (`shape_policy`): not at all on the CPU; to static
buckets where a captured CUDA graph replays each shape.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec import artifact as names
from cellspec.artifact import LayerCache, Manifest
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.runtime.draws import Draws
from cellspec.runtime.planner import ShapePolicy

BACKENDS = ("ort-cpu", "ort-cuda")
MAX_THREADS = 256


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | str | None, ...]  # ints for static dims, names/None for dynamic ones
    dtype: type | None  # numpy dtype, None when numpy has none (bfloat16)


class Engine:
    """One graph loaded on a backend."""

    path: Path
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]


class Pools:
    """Row pools of one cell cache, owned by a backend: each [max_cells, width], filled from one
    graph output at the cells a step writes. The KV pools: `k_pool.i` from `k_new.i` and
    `v_pool.i` from `v_new.i` for every layer (bound as inputs where a graph reads them); the
    taps pool: `taps_pool` from `taps` (gathered by cell into the draft's context)."""

    def __init__(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int) -> None:
        self.max_cells, self.pairs, self.width = max_cells, tuple(pairs), width

    @property
    def names(self) -> list[str]:
        return [pool for pool, _ in self.pairs]

    @property
    def new_names(self) -> list[str]:
        return [new for _, new in self.pairs]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.max_cells, self.width)


class Chain(ABC):
    """Decode steps launched one after another where the engine runs: `launch` starts a step
    and returns while it runs (the host plans the next meanwhile); `row` waits for a step's
    drawn tokens; `tokens` returns every step's, [steps, rows]."""

    @abstractmethod
    def launch(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
               cells: np.ndarray, draws: Draws, static: bool, fed_back: bool) -> None:
        """Start a step: run it, commit its keys and values, draw its tokens. fed_back: the
        first `rows` tokens of the step are the ones the previous step drew, copied there."""

    @abstractmethod
    def row(self, step: int) -> list[int]:
        """The tokens step `step` drew (waits for them)."""

    @abstractmethod
    def tokens(self) -> np.ndarray: ...

    @abstractmethod
    def abandon(self) -> None:
        """After an error: wait for what is still running, so nothing writes the buffers later."""


def kv_pairs(num_layers: int) -> list[tuple[str, str]]:
    """(k_pool.0, k_new.0), (v_pool.0, v_new.0), (k_pool.1, k_new.1), ..."""
    return [(pool(i), new(i)) for i in range(num_layers)
            for pool, new in ((names.k_pool, names.k_new), (names.v_pool, names.v_new))]


TAPS_POOL = "taps_pool"


@dataclass(frozen=True)
class Gather:
    """Feed input `name` with rows of a pool: `pools`' `pool` at `cells` [S, Q]."""

    name: str
    pools: Pools
    pool: str
    cells: np.ndarray


@dataclass
class TreeGrowth:
    """A verify's trees grown on the device (`OrtDeviceBackend.launch`'s `grow`): from the
    choices a draft block left in its TOP_IDS / TOP_LOGP, by the device's grow_trees, into the
    verify's staged tokens, positions and attn_mask, after the staging and before the run."""

    block: Engine  # the draft block engine whose outputs hold the choices
    owners: int
    depth_limit: int  # the block's proposal rows per owner (n_draft)
    nodes: int
    stride: int  # the verify's draws per owner (TreeStep.stride)
    # where a session samples: [owners, n] float32, the uniforms of the positions 1, 2, ...
    # after each owner's anchor, from which the device gives each tree row its own (its depth
    # past the anchor, or past the anchor a walk moved on to: tree_uniforms)
    uniforms: np.ndarray | None = None
    choices: int | None = None  # of each row's TOP_K choices, the first this many (None: all)
    # set by launch: the call that waits for the trees and gives [owners, 3, nodes + 1]:
    # each row's token, parent (-1 for the anchor) and depth
    fetch: Callable[[], np.ndarray] | None = None


@dataclass
class TreeVerdict:
    """A verify's trees walked on the device (`OrtDeviceBackend.queue`'s and `launch`'s
    `walk`), before the host has its tokens: the trees the device grew for it (its last
    TreeGrowth) walked by its draws, as runtime/trees.py's walk, into the staged inputs of the
    next cycle's draft block or verify (each owner's anchor, positions, accepted cells and
    mask), after the staging and before the run."""

    verify: Engine  # the target engine of the verify (its draws: its GREEDY or the sampler's)
    stride: int  # draws per owner there (the verify step's slots per row)
    owners: int
    rows: int  # each tree's rows: its nodes and the anchor
    # whether the walk's result comes back to the host (`fetch`); False: nobody reads it (the
    # second walk of the same trees, into a verify's inputs), and its copy is not queued
    fetched: bool = True
    # set by queue / launch where fetched: the call that waits for the walk and gives [owners,
    # 2]: each accepted path's length (the anchor's row included) and the draw after it
    fetch: Callable[[], np.ndarray] | None = None


class Backend(ABC):
    name: str
    # True where `start_chain` overlaps the host's planning of a decode step with the device's
    # run of the one before (see TargetModel.decode_chain); else chains are plain step loops
    runs_ahead = False
    # True where a tree step's rows (TargetModel.forward's tree) round exactly as the plain
    # steps of their paths: the target's attention keys each new token by its position (only
    # CellAttention does; the CPU's by-position form has one key per position and row)
    exact_trees = False
    # True where `launch` queues a run and returns before it ends (OrtDeviceBackend), so that
    # a caller can queue a step and finish it later (DFlashExecutor.verify_ahead)
    launches = False
    # True where `launch` takes `grow` (TreeGrowth): a verify's trees grown on the device
    grows_trees = False

    def start_chain(self, steps: int, rows: int) -> Chain:
        """A chain of `steps` decode steps of `rows` sessions, whose drawn tokens stay where the
        engine ran and feed the next step (only where `runs_ahead`)."""
        raise NotImplementedError(f"backend {self.name} does not run decode chains")

    @abstractmethod
    def load_engine(self, path: Path) -> Engine: ...

    def load_draft_engine(self, path: Path) -> Engine:
        """A DFlash draft graph's engine: load_engine's, unless the backend runs a draft's
        arithmetic differently (ort-cuda's CELLSPEC_CUDA_DRAFT_PROJECTIONS)."""
        return self.load_engine(path)

    @abstractmethod
    def make_pools(self, max_cells: int, pairs: Sequence[tuple[str, str]], width: int,
                   dtype: type) -> Pools:
        """Zeroed row pools (`Pools`) for a cache of `max_cells` cells."""

    @abstractmethod
    def run(self, engine: Engine, pools: Sequence[Pools], feeds: dict[str, np.ndarray],
            outputs: list[str], cells: np.ndarray | None = None,
            draws: Draws | None = None, static: bool = False,
            gather: Gather | None = None,
            meanwhile: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """Run `engine` on host `feeds`, every pool bound where it reads it; with `cells`
        ([S, Q], the plan's), commit each pool's output there. With `draws` (one per logits
        row), draw each row's token where the logits are: `DRAWN` [R] holds them. `static`:
        the feeds have a static shape of the policy (a backend may capture and replay it).
        `gather` feeds one input from a pool's rows, where the pool is. `meanwhile` is called
        once the run, its commit and its draw are queued (or done, where the backend waits
        for each run), before the outputs come back: runs it makes go after this one, and on
        a device its host work overlaps this run's. Returns host `outputs` (and DRAWN)."""

    def make_kv_pools(self, max_cells: int, layers: Sequence[LayerCache], dtype: type
                      ) -> Pools:
        """A cache's key and value pools, [max_cells, KV * D] per layer."""
        widths = {layer.row_width for layer in layers}
        if len(widths) != 1:
            raise InvalidArtifact(f"pools of widths {sorted(widths)}: every layer of a cache "
                                  "must have the same kv heads and head dim")
        return self.make_pools(max_cells, kv_pairs(len(layers)), widths.pop(), dtype)

    def shape_policy(self, manifest: Manifest, folder: Path) -> ShapePolicy:
        """How steps of the artifact in `folder` are padded: exact shapes unless the backend
        replays static ones, but over a multiple of 64 cells (a softmax over 55 cells and over
        the same 55 among 56 round differently: 64 keeps a session's tokens bitwise the same
        alone and in a batch); with 4-bit weights, no row alone in a tile of 128 (see
        ShapePolicy.lone_row_tile)."""
        return ShapePolicy(lone_row_tile=128 if manifest.target.quantization == "int4" else 0,
                           cell_multiple=64)


def check_backend(backend: str, dtype: str, threads: int | None) -> None:
    """Refuse, before anything loads, a backend, dtype or thread count that cannot run."""
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if dtype == "bfloat16" and backend == "ort-cpu":
        raise InvalidArgument("backend ort-cpu runs float32 and float16 artifacts; this one is "
                              "bfloat16 (ONNX Runtime has no bfloat16 CPU kernels): export "
                              "with --dtype float32 or float16, or run it on ort-cuda")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or not 1 <= threads <= MAX_THREADS):
        raise InvalidArgument(f"threads {threads!r}: expected an integer in 1..{MAX_THREADS} "
                              "or None (all cores)")


def load_backend(backend: str, folder: Path, manifest: Manifest, threads: int | None,
                 max_sessions: int, lone_engine: bool = False) -> Backend:
    """The backend named `backend` (checked by `check_backend` first) for this artifact.
    lone_engine: the executor runs one engine only (plain decoding), so the CPU's pool threads
    may spin between its runs."""
    if backend == "ort-cuda":
        from cellspec.runtime.ort_device import make_cuda_backend

        return make_cuda_backend(folder, manifest, max_sessions)
    from cellspec.runtime.ort_cpu import OrtCpuBackend

    return OrtCpuBackend(threads, spinning=lone_engine)
