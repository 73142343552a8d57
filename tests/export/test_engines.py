"""Engines for every graph of an artifact (TensorRT for RTX): profiles from the manifest, the
engine table, failures that leave the artifact as it was.

The engines are only built here, never run: this machine has no GPU the engines could run on.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from cellspec.artifact import MANIFEST_NAME, DraftMethod, Manifest
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.export import ExportConfig, export
from cellspec.export.engines import (
    artifact_ranges,
    build_artifact_engines,
    engine_profiles,
    unbuildable_graphs,
)
from cellspec.export.sampler import write_sampler_graphs

CAPABILITIES = ["sm80", "sm89"]
WIDTHS, DYNAMIC, ROWS, MAX_CELLS, MAX_CONTEXT = (1, 2, 4), 8, 4, 32, 24
TINY = ExportConfig(static_widths=WIDTHS, dynamic_width=DYNAMIC, batch_buckets=(1, ROWS),
                    max_cells=MAX_CELLS, max_context=MAX_CONTEXT)


@pytest.fixture(scope="module")
def trt():
    return pytest.importorskip("tensorrt_rtx")


@pytest.fixture
def tiny_artifact(tiny_checkpoint, tmp_path):
    """A tiny Qwen3 artifact without a draft: target and sampler/verifier graphs."""
    checkpoint, _ = tiny_checkpoint("qwen3_gqa")
    out = tmp_path / "artifact"
    export(checkpoint, out, TINY, progress=False)
    return out


@pytest.fixture
def dflash_copy(dflash_artifact, tmp_path):
    """A copy of the session's tiny DFlash artifact, free to gain engines."""
    return Path(shutil.copytree(dflash_artifact, tmp_path / "dflash"))


def digests(folder: Path) -> dict[str, str]:
    """Every file but the plans (a rewrite left behind, `*.trt.onnx`, would show here)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.suffix != ".plan"}


def range_of(profile: dict, name: str, axis: int) -> list[int]:
    """[min, opt, max] of one dim of one input in a manifest profile."""
    return [shape[axis] for shape in profile[name]]


def check_engine_table(manifest: Manifest, expected: dict[str, list[dict]]) -> None:
    """One engine per graph and capability, graph by graph, each with exactly these profiles."""
    pairs = [(e.graph, e.compute_capability) for e in manifest.engines]
    assert pairs == [(g, sm) for g in expected for sm in CAPABILITIES]
    for engine in manifest.engines:
        assert engine.path == f"{Path(engine.graph).stem}.{engine.compute_capability}.plan"
        assert list(engine.profiles) == expected[engine.graph]


def width_bounds(widths, dynamic) -> list[tuple[int, int]]:
    """(min, max) of Q per target profile: each static width exactly, then 1..dynamic."""
    return [(w, w) for w in widths] + [(1, dynamic)]


def step_profiles(widths, dynamic, rows, max_context) -> list[dict]:
    """The target's profiles: S in 1..rows; Q = w per static width, then Q in [1, dynamic];
    R in 1..rows * Q; N in 0..max_context cells per row, the mask's last dim N + Q."""
    profiles = []
    for low, high in width_bounds(widths, dynamic):
        tokens = [[1, low], [rows, high], [rows, high]]
        span = [low, max_context + high, max_context + high]
        profiles.append({
            "tokens": tokens, "positions": tokens,
            "cell_table": [[1, 0], [rows, max_context], [rows, max_context]],
            "attn_mask": [[1, 1, low, span[0]], [rows, 1, high, span[1]],
                          [rows, 1, high, span[2]]],
            "logits_rows": [[1], [rows * high], [rows * high]],
        })
    return profiles


def test_tiny_dflash_artifact_builds_every_graph(trt, dflash_copy):
    out = dflash_copy
    before = Manifest.load(out)
    draft, vocab, context = before.draft, before.model.vocab_size, before.max_context
    widths, dynamic = before.target.static_widths, before.target.dynamic_width
    rows = before.target.batch_buckets[-1]
    hidden = len(draft.tap_layer_ids) * before.model.hidden_size
    files = digests(out)
    manifest = build_artifact_engines(out, CAPABILITIES, progress=False)
    owners, block = range(1, draft.max_owners + 1), draft.block_size
    logits_rows = [[1, rows * high, rows * high] for _, high in width_bounds(widths, dynamic)]
    steps = [[1, 1], [rows, dynamic], [rows, dynamic]]
    check_engine_table(manifest, {
        "target.onnx": step_profiles(widths, dynamic, rows, context),
        "draft_context.onnx": [{"hidden": [[*s, hidden] for s in steps], "positions": steps}],
        "draft_block.onnx": [{
            "tokens": [[o, block]] * 3, "positions": [[o, block]] * 3,
            "cell_table": [[o, 0], [o, context], [o, context]],
            "attn_mask": [[o, 1, block, block], [o, 1, block, context + block],
                          [o, 1, block, context + block]],
            "proposal_rows": [[1], [block - 1], [block - 1]]} for o in owners],
        "argmax.onnx": [{"logits": [[r, vocab] for r in row]} for row in logits_rows],
        "sample.onnx": [{"logits": [[r, vocab] for r in row], "params": [[r, 4] for r in row]}
                        for row in logits_rows],
        "verify_argmax.onnx": [{"logits": [[o, block, vocab]] * 3,
                                "candidates": [[o, block]] * 3} for o in owners],
        "verify.onnx": [{"logits": [[o, block, vocab]] * 3, "candidates": [[o, block]] * 3,
                         "params": [[o, block + 3]] * 3} for o in owners],
    })
    assert Manifest.load(out) == manifest
    assert replace(manifest, engines=()) == before
    for engine in manifest.engines:
        assert (out / engine.path).stat().st_size > 0
    after = digests(out)
    del files[MANIFEST_NAME], after[MANIFEST_NAME]
    assert after == files  # graphs and weights untouched, no rewrite left: ORT runs what it ran


def test_tiny_target_and_sampler_graphs_build(trt, tiny_artifact):
    manifest = build_artifact_engines(tiny_artifact, CAPABILITIES, progress=True)
    assert [e.graph for e in manifest.engines[::2]] == [
        "target.onnx", "argmax.onnx", "sample.onnx", "verify_argmax.onnx", "verify.onnx"]
    assert list(manifest.engines[0].profiles) == step_profiles(WIDTHS, DYNAMIC, ROWS,
                                                               MAX_CONTEXT)
    # without a draft: one owner, a window of 1 up to the widest static width
    assert list(manifest.engines[-1].profiles) == [{
        "logits": [[1, 1, 256], [1, 4, 256], [1, 4, 256]],
        "candidates": [[1, 1], [1, 4], [1, 4]], "params": [[1, 4], [1, 7], [1, 7]]}]


def test_rebuilding_some_graphs_keeps_the_other_engines(trt, tiny_artifact):
    first = build_artifact_engines(tiny_artifact, ["sm80"], progress=False)
    second = build_artifact_engines(tiny_artifact, ["sm89", "sm80"], progress=False,
                                    graphs={"argmax.onnx"})
    assert [(e.graph, e.compute_capability) for e in second.engines] == (
        [(e.graph, "sm80") for e in first.engines if e.graph != "argmax.onnx"]
        + [("argmax.onnx", "sm89"), ("argmax.onnx", "sm80")])
    assert Manifest.load(tiny_artifact) == second


def with_vocab(out: Path, vocab_size: int) -> None:
    """Replace the artifact's sampler/verifier graphs with those of a larger vocabulary."""
    manifest = Manifest.load(out)
    write_sampler_graphs(out, vocab_size)
    replace(manifest, model=replace(manifest.model, vocab_size=vocab_size)).save(out)


def test_failed_build_is_named_and_leaves_the_artifact_as_it_was(trt, tiny_artifact):
    # TensorRT's TopK takes k <= 3840: the full-vocabulary sort of `sample` does not build.
    with_vocab(tiny_artifact, 4096)
    before = digests(tiny_artifact)
    graphs = ["target.onnx", "argmax.onnx", "sample.onnx"]
    with pytest.raises(InvalidArtifact, match=(
            r"sample\.onnx: TensorRT cannot build an engine for sm80 with profile 0 "
            r"\{logits: \[\[1, 4096\], \[4, 4096\], \[4, 4096\]\], params: .*\(the first "
            r"that fails alone\): .*K exceeds the maximum value allowed \(3840\)")):
        build_artifact_engines(tiny_artifact, CAPABILITIES, progress=False, graphs=graphs)
    assert digests(tiny_artifact) == before  # the manifest too
    assert not list(tiny_artifact.glob("*.plan*"))  # not even the target's, built before


def test_full_vocabulary_sorts_are_left_out_by_default(trt, tiny_artifact, caplog):
    with_vocab(tiny_artifact, 4096)
    assert unbuildable_graphs(Manifest.load(tiny_artifact)) == {
        f"{name}.onnx": "its TopK sorts all 4096 tokens, TensorRT takes at most 3840"
        for name in ("sample", "verify")}
    manifest = build_artifact_engines(tiny_artifact, ["sm89"], progress=False)
    assert [e.graph for e in manifest.engines] == [
        "target.onnx", "argmax.onnx", "verify_argmax.onnx"]
    assert "sample.onnx: no TensorRT engine, it stays on ONNX Runtime" in caplog.text


def test_graph_with_a_dim_no_family_bounds_is_named(tiny_artifact):
    # verify_argmax.onnx read as the argmax graph: the step family has no range for O
    manifest = replace(Manifest.load(tiny_artifact), graphs={"argmax": "verify_argmax.onnx"})
    with pytest.raises(InvalidArtifact, match=r"verify_argmax\.onnx: input logits: dim 'O' has "
                                              r"no range \(given \['N', 'Q', 'R', 'S'\]\)"):
        engine_profiles(tiny_artifact, manifest)


def test_unknown_sampler_graph_is_named(tiny_artifact):
    manifest = replace(Manifest.load(tiny_artifact), graphs={"top_k": "top_k.onnx"})
    with pytest.raises(InvalidArtifact, match=r"'top_k' \(top_k\.onnx\) has no profile family"):
        artifact_ranges(manifest)


def test_unknown_graph_selection_is_refused(tiny_artifact):
    with pytest.raises(InvalidArgument, match=r"\['nope\.onnx'\]: not graphs of the artifact"):
        engine_profiles(tiny_artifact, Manifest.load(tiny_artifact), graphs={"nope.onnx"})


def test_context_and_owner_ranges_follow_the_manifest(tiny_artifact):
    draft = DraftMethod("c.onnx", "b.onnx", block_size=16, tap_layer_ids=(0,), mask_token_id=0,
                        max_owners=3, num_layers=1)
    manifest = Manifest.load(tiny_artifact)
    manifest = replace(manifest, target=replace(manifest.target, tap_layer_ids=(0,)),
                       draft=draft, draft_cache=manifest.target_cache[:1], graphs={})
    ranges = artifact_ranges(manifest)
    assert list(ranges) == ["target.onnx", "c.onnx", "b.onnx"]
    assert ranges["c.onnx"] == [{"S": (1, ROWS, ROWS), "Q": (1, DYNAMIC, DYNAMIC)}]
    assert ranges["b.onnx"] == [{"O": (o, o, o), "W": (16, 16, 16), "N": (0, MAX_CONTEXT,
                                 MAX_CONTEXT), "P": (1, 15, 15), "W_plus_3": (19, 19, 19)}
                                for o in (1, 2, 3)]


@pytest.mark.slow
def test_smollm2_engines_match_the_methods(trt, tmp_path):
    from cellspec.errors import InvalidCheckpoint
    from cellspec.export.gguf import find_bundled_gguf

    try:
        gguf = find_bundled_gguf()
    except InvalidCheckpoint as error:
        pytest.skip(str(error))
    out = tmp_path / "smollm2"
    config = ExportConfig()  # float32, widths 1..32 and the dynamic method up to 256
    export(gguf, out, config, progress=False)
    manifest = build_artifact_engines(out, CAPABILITIES, progress=False)
    try:
        # sample.onnx and verify.onnx are left out: TopK k = 49152 > TensorRT's 3840
        assert [(e.graph, e.compute_capability) for e in manifest.engines] == [
            (g, sm) for g in ("target.onnx", "argmax.onnx", "verify_argmax.onnx")
            for sm in CAPABILITIES]
        bounds = width_bounds(config.static_widths, config.dynamic_width)
        rows, context = config.batch_buckets[-1], manifest.max_context
        for engine in manifest.engines[:2]:
            profiles = engine.profiles
            assert [range_of(p, "tokens", 1) for p in profiles] == [[lo, hi, hi]
                                                                     for lo, hi in bounds]
            assert all(range_of(p, "tokens", 0) == [1, rows, rows] for p in profiles)
            assert [range_of(p, "logits_rows", 0) for p in profiles] == [
                [1, rows * hi, rows * hi] for _, hi in bounds]
            assert all(range_of(p, "cell_table", 1) == [0, context, context] for p in profiles)
            assert [range_of(p, "attn_mask", 3) for p in profiles] == [
                [lo, context + hi, context + hi] for lo, hi in bounds]
            assert (out / engine.path).stat().st_size > (out / "weights.bin").stat().st_size
        for engine in manifest.engines[2:4]:
            assert [range_of(p, "logits", 0) for p in engine.profiles] == [
                [1, rows * hi, rows * hi] for _, hi in bounds]
        assert not list(out.glob("*.trt.onnx"))
        assert Manifest.load(out) == manifest
    finally:
        for plan in out.glob("*.plan"):
            plan.unlink()
