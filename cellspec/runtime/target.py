"""The target model on an engine: its KV pools, its cell cache, and one packed forward.

`TargetModel.forward` runs a packed step slice by slice (planner), commits each slice's keys
and values into the cells the cache assigned, and returns the logits rows asked for and the
taps. Callers validate before calling; an engine failure surfaces as `ExecutionFailed` after
earlier slices were committed, so the caller must poison the sequences it touched.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec import artifact as names
from cellspec.artifact import Manifest
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.runtime.cell_cache import PAD_SEQ, CellCache, StepPlan
from cellspec.runtime.engine import load_engine
from cellspec.runtime.planner import plan_slices


@dataclass(frozen=True)
class ForwardResult:
    logits: np.ndarray  # [R, V] float32, one row per requested logit index, in request order
    taps: np.ndarray | None  # [T, n_taps * hidden], one row per packed token


@dataclass
class MethodStats:
    calls: int = 0
    tokens: int = 0
    seconds: float = 0.0


class TargetModel:
    def __init__(self, folder: Path, manifest: Manifest, backend: str, threads: int | None):
        self.manifest = manifest
        self.engine = load_engine(folder / manifest.target.graph, backend, threads)
        check_target_graph(manifest, self.engine.inputs, self.engine.outputs)
        self.cache = CellCache(manifest.max_cells, manifest.window)
        self.pools = make_pools(manifest.max_cells, manifest.target_cache,
                                self.engine.inputs[names.k_pool(0)].dtype)
        self.has_taps = bool(manifest.target.tap_layer_ids)
        self.output_names = [names.LOGITS] + [
            name(i) for i in range(manifest.model.num_layers) for name in (names.k_new, names.v_new)
        ] + ([names.TAPS] if self.has_taps else [])
        self.stats: dict[str, MethodStats] = defaultdict(MethodStats)

    def forward(
        self,
        seq_ids: np.ndarray,
        tokens: np.ndarray,
        positions: np.ndarray,
        logit_indices: np.ndarray,
    ) -> ForwardResult:
        """Run tokens [T] of seq_ids [T] at positions [T]; keep logits at logit_indices [R]."""
        target = self.manifest.target
        logits, taps = [], []
        order = np.argsort(logit_indices, kind="stable")
        sorted_rows = logit_indices[order]
        for piece in plan_slices(tokens.size, target.static_widths, target.dynamic_width):
            span = slice(piece.offset, piece.offset + piece.length)
            pad = piece.width - piece.length if self.engine.pads_to_static_widths else 0
            plan = self.cache.declare_step(
                np.pad(seq_ids[span], (0, pad), constant_values=PAD_SEQ),
                np.pad(positions[span], (0, pad)),
            )
            rows = sorted_rows[(sorted_rows >= piece.offset)
                               & (sorted_rows < piece.offset + piece.length)]
            method = f"static_{piece.length + pad}" if piece.is_static else "dynamic"
            out = self._run(plan, np.pad(tokens[span], (0, pad)), rows - piece.offset, method)
            self._commit(plan, out)
            logits.append(out[names.LOGITS])
            if self.has_taps:
                taps.append(out[names.TAPS][0, : piece.length])
        merged = np.concatenate(logits) if logits else np.zeros((0, self.vocab_size), np.float32)
        result = np.empty_like(merged)
        result[order] = merged
        return ForwardResult(result, np.concatenate(taps) if self.has_taps else None)

    @property
    def vocab_size(self) -> int:
        return self.manifest.model.vocab_size

    def _run(self, plan: StepPlan, tokens: np.ndarray, rows: np.ndarray, method: str) -> dict:
        feeds = {
            names.TOKENS: tokens[None, :],
            names.POSITIONS: plan.positions,
            names.LOGITS_ROWS: rows.astype(np.int64),
            names.CELLS_READ: plan.cells_read,
            names.ATTN_BIAS: plan.attn_bias,
            **self.pools,
        }
        if plan.attn_bias_window is not None:
            feeds[names.ATTN_BIAS_WINDOW] = plan.attn_bias_window
        start = time.perf_counter()
        out = self.engine.run(feeds, self.output_names)
        stats = self.stats[method]
        stats.calls += 1
        stats.tokens += int(np.count_nonzero(plan.seq_ids != PAD_SEQ))
        stats.seconds += time.perf_counter() - start
        return out

    def _commit(self, plan: StepPlan, out: dict) -> None:
        # Padding rows land in the scratch cell, which no sequence reads.
        for i in range(self.manifest.model.num_layers):
            self.pools[names.k_pool(i)][plan.cells] = out[names.k_new(i)]
            self.pools[names.v_pool(i)][plan.cells] = out[names.v_new(i)]
        self.cache.commit_step(plan)


def make_pools(max_cells: int, layers, dtype) -> dict[str, np.ndarray]:
    """Zeroed key and value pools, [max_cells, kv_heads, head_dim] per layer."""
    num_bytes = sum(2 * max_cells * c.kv_heads * c.head_dim for c in layers)
    num_bytes *= np.dtype(dtype).itemsize
    try:
        return {name(i): np.zeros((max_cells, c.kv_heads, c.head_dim), dtype=dtype)
                for i, c in enumerate(layers) for name in (names.k_pool, names.v_pool)}
    except MemoryError as error:
        raise InvalidArgument(f"the KV pools of {max_cells} cells need {num_bytes / 2**30:.1f} "
                              "GiB, more than this host can allocate: export with a smaller "
                              "--max-cells") from error


def check_target_graph(manifest: Manifest, inputs: dict, outputs: dict) -> None:
    """Refuse a graph whose inputs or outputs disagree with the manifest, naming the field."""
    model = manifest.model
    graph = manifest.target.graph
    required = [names.TOKENS, names.POSITIONS, names.LOGITS_ROWS, names.CELLS_READ, names.ATTN_BIAS]
    if manifest.window:
        required.append(names.ATTN_BIAS_WINDOW)
    for name in required:
        _require(name in inputs, f"{graph}: input {name} missing")
    check_pools(graph, inputs, manifest.max_cells, manifest.target_cache, "target_cache")
    for i in range(len(manifest.target_cache)):
        for new in (names.k_new(i), names.v_new(i)):
            _require(new in outputs, f"{graph}: output {new} missing")
    _require(names.LOGITS in outputs, f"{graph}: output logits missing")
    vocab = outputs[names.LOGITS].shape[-1]
    _require(not isinstance(vocab, int) or vocab == model.vocab_size,
             f"{graph}: logits width {vocab}, manifest field model.vocab_size says "
             f"{model.vocab_size}")
    has_taps = names.TAPS in outputs
    _require(has_taps == bool(manifest.target.tap_layer_ids),
             f"{graph}: taps output {'present' if has_taps else 'missing'}, manifest field "
             f"target.tap_layer_ids is {list(manifest.target.tap_layer_ids)}")
    if has_taps:
        width = outputs[names.TAPS].shape[-1]
        expected = len(manifest.target.tap_layer_ids) * model.hidden_size
        _require(not isinstance(width, int) or width == expected,
                 f"{graph}: taps width {width}, manifest says {expected}")


def check_pools(graph: str, inputs: dict, max_cells: int, layers, field: str) -> None:
    """Every layer's k/v pool input is [max_cells, kv_heads, head_dim] as the manifest says."""
    for i, layer in enumerate(layers):
        expected = (max_cells, layer.kv_heads, layer.head_dim)
        for pool in (names.k_pool(i), names.v_pool(i)):
            shape = inputs[pool].shape if pool in inputs else None
            _require(shape == expected, f"{graph}: input {pool} is {shape}, manifest fields "
                     f"max_cells/{field}[{i}] say {expected}")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidArtifact(message)
