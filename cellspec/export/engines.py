"""TensorRT engines for every graph of an artifact, profiles derived from its manifest.

A graph's profiles come from one family of range sets over dim names, one set per profile; a set
may name dims the graph lacks (the sampler's `argmax` reads only R of the step family):

- step, one set per target method (each static width w: Q = w exactly; then the dynamic
  method: Q in [1, dynamic_width]); S, the rows, in [1, the largest batch bucket]; R, the logits
  rows, in [1, S * Q] at their largest; N, the cells each row reads, in [0, max_context].
  For the target graph and the `argmax` / `sample` graphs (R rows of logits).
- owner, one set per owner count o = 1..max_owners: O = o, N in [0, max_context], W = block
  (the verified window), W_plus_3 = W + 3 (the verify params), P in [1, block - 1] (the
  proposal rows draft_block reads out). For draft_block and the
  `verify_argmax` / `verify` graphs. Without a draft: O = 1, W in [1, widest static width].
- context, one set: S in [1, the largest batch bucket], Q in [1, widest target step], the rows
  and taps draft_context commits at once.

Every opt is the max. `sample` and `verify` sort the whole vocabulary with one TopK, whose k
TensorRT caps at 3840: for a larger vocabulary they get no engine unless asked for by name (the
build then fails), and stay on ONNX Runtime. The engine table of manifest.json is rewritten only
once every engine is built.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path

from cellspec.artifact import MANIFEST_NAME, Manifest
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.export.profiles import (
    DimRange,
    GraphProfiles,
    make_graph_profiles,
    target_ranges,
    with_derived,
)
from cellspec.export.tensorrt import build_engines

__all__ = ["artifact_ranges", "build_artifact_engines", "engine_profiles",
           "unbuildable_graphs"]

Ranges = dict[str, DimRange]
# The family of each sampler/verifier graph of `manifest.graphs`, by its name there.
SAMPLER_FAMILIES = {"argmax": "step", "sample": "step", "verify_argmax": "owner",
                    "verify": "owner"}
FULL_SORTS = ("sample", "verify")  # sampler graphs whose TopK has k = vocab_size
TOPK_MAX = 3840  # TensorRT's largest TopK k (TensorRT-RTX 1.7: "K exceeds the maximum value")
log = logging.getLogger(__name__)


def build_artifact_engines(artifact_dir: str | Path, compute_capabilities: Sequence[str],
                           progress: bool = True, *, graphs: Collection[str] | None = None
                           ) -> Manifest:
    """Build a TensorRT-RTX engine per graph of the artifact and compute capability ("sm80",
    "8.9", ...), record them in manifest.json and return the updated manifest.

    graphs: the graph files to build (e.g. {"target.onnx"}); None = every graph TensorRT can
    build (`unbuildable_graphs` are left out, with a warning). Engines already in the manifest
    for other (graph, compute capability) pairs are kept. Raises `InvalidArtifact` naming the
    graph, the profile and TensorRT's message when a graph does not parse or build; then no
    engine is written and manifest.json is left as it was.
    """
    folder = Path(artifact_dir)
    manifest = Manifest.load(folder)
    if graphs is None:
        left_out = unbuildable_graphs(manifest)
        for graph, reason in left_out.items():
            log.warning("%s: no TensorRT engine, it stays on ONNX Runtime: %s", graph, reason)
        graphs = [g for g in artifact_ranges(manifest) if g not in left_out]
    built = build_engines(folder, engine_profiles(folder, manifest, graphs),
                          compute_capabilities, progress)
    rebuilt = {(e.graph, e.compute_capability) for e in built}
    kept = [e for e in manifest.engines if (e.graph, e.compute_capability) not in rebuilt]
    updated = replace(manifest, engines=tuple(kept + built))
    _save(folder, updated)
    return updated


def engine_profiles(artifact_dir: str | Path, manifest: Manifest,
                    graphs: Collection[str] | None = None) -> list[GraphProfiles]:
    """The optimization profiles of the artifact's graphs (all, or the files in `graphs`), in
    engine order: target, draft_context, draft_block, then `manifest.graphs` in their order."""
    table = artifact_ranges(manifest)
    if graphs is not None:
        unknown = sorted(set(graphs) - table.keys())
        if unknown:
            raise InvalidArgument(f"graphs {unknown}: not graphs of the artifact ({list(table)})")
        table = {graph: ranges for graph, ranges in table.items() if graph in graphs}
    profiles = []
    for graph, ranges in table.items():
        try:
            profiles.append(make_graph_profiles(artifact_dir, graph, ranges))
        except InvalidArgument as error:  # a dim the families do not bound: the graph's fault
            raise InvalidArtifact(f"{graph}: {error}") from error
    return profiles


def unbuildable_graphs(manifest: Manifest) -> dict[str, str]:
    """Graph file -> why TensorRT cannot build it, for the graphs known to fail."""
    vocab = manifest.model.vocab_size
    if vocab <= TOPK_MAX:
        return {}
    return {manifest.graphs[name]: f"its TopK sorts all {vocab} tokens, TensorRT takes at most "
            f"{TOPK_MAX}" for name in FULL_SORTS if name in manifest.graphs}


def artifact_ranges(manifest: Manifest) -> dict[str, list[Ranges]]:
    """Graph file -> its range sets, one per profile in engine order (see the module doc)."""
    rows, width = manifest.target.batch_buckets[-1], manifest.max_step_width
    families = {"step": target_ranges(manifest.target, manifest.max_context),
                "owner": _owner_ranges(manifest),
                "context": [{"S": (1, rows, rows), "Q": (1, width, width)}]}
    table = {manifest.target.graph: families["step"]}
    if manifest.draft is not None:
        table[manifest.draft.context_graph] = families["context"]
        table[manifest.draft.block_graph] = families["owner"]
    for name, graph in manifest.graphs.items():
        if name not in SAMPLER_FAMILIES:
            raise InvalidArtifact(f"manifest graphs: {name!r} ({graph}) has no profile family; "
                                  f"known: {sorted(SAMPLER_FAMILIES)}")
        table[graph] = families[SAMPLER_FAMILIES[name]]
    return table


def _owner_ranges(manifest: Manifest) -> list[Ranges]:
    cells = (0, manifest.max_context, manifest.max_context)
    derived = {"W_plus_3": "W + 3"}
    if manifest.draft is None:
        widest = manifest.target.static_widths[-1]
        return [with_derived({"O": (1, 1, 1), "W": (1, widest, widest), "N": cells}, derived)]
    block = manifest.draft.block_size
    rows = (1, block - 1, block - 1)
    return [with_derived({"O": (o, o, o), "W": (block, block, block), "N": cells, "P": rows},
                         derived) for o in range(1, manifest.draft.max_owners + 1)]


def _save(folder: Path, manifest: Manifest) -> None:
    """Write manifest.json whole or not at all."""
    partial = folder / f"{MANIFEST_NAME}.partial"
    partial.write_text(manifest.to_json())
    os.replace(partial, folder / MANIFEST_NAME)

