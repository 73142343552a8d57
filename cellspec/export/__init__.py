"""checkpoint -> artifact: reads safetensors/GGUF, emits ONNX, writes the manifest."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx

from cellspec import artifact
from cellspec.artifact import LayerCache, Manifest, ModelInfo, TargetMethod
from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export.arch import Hparams, read_hparams
from cellspec.export.checkpoint import Checkpoint, load_checkpoint
from cellspec.export.config import ExportConfig
from cellspec.export.draft import export_draft
from cellspec.export.draft_checkpoint import DraftCheckpoint, load_draft
from cellspec.export.progress import stage
from cellspec.export.sampler import write_sampler_graphs
from cellspec.export.target import make_target_graph
from cellspec.export.weights import WeightStore
from cellspec.staging import staged_folder
from cellspec.tokenizer import chat_template_problem

TARGET_GRAPH = "target.onnx"

__all__ = ["Checkpoint", "ExportConfig", "TARGET_GRAPH", "export", "load_checkpoint"]


def export(checkpoint: str | Path | Checkpoint, out: str | Path,
           config: ExportConfig | None = None, progress: bool = True, *,
           overwrite: bool = False, draft: str | Path | None = None) -> Manifest:
    """Export a HF checkpoint folder, a `.gguf` file or a loaded Checkpoint into the artifact
    folder `out`: target.onnx, weights.bin, tokenizer.json (when the checkpoint has one), the
    sampler and verifier graphs and manifest.json. With `draft` (a z-lab DFlash checkpoint
    folder), the target also returns the draft's taps, and draft_context.onnx/draft_block.onnx
    borrow the target's embedding and LM head. `out` must be missing or empty; with
    `overwrite`, an existing artifact there is replaced. The artifact is written into a temporary
    sibling of `out` and renamed into place only when complete: when the export fails, `out` is
    left exactly as it was."""
    config = config or ExportConfig()
    out = _check_out(Path(out), overwrite)
    # the draft's folder opened (its tensors are read lazily) before the target's long read, so
    # that a wrong draft path is said at once
    draft_files = None if draft is None else load_checkpoint(Path(draft))
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else _read(Path(checkpoint), progress)
    hp = read_hparams(ckpt.config)
    _check_tokenizer(ckpt, hp)
    draft_ckpt = None if draft is None else load_draft(draft, hp, draft_files)
    config = _with_draft_taps(config, draft_ckpt)
    _check_against_model(config, hp)
    with staged_folder(out, replace=overwrite) as temp:
        manifest = _write_artifact(ckpt, hp, config, draft_ckpt, temp, progress)
    return manifest


def _read(checkpoint: Path, progress: bool) -> Checkpoint:
    what = "reading and dequantizing" if checkpoint.suffix == ".gguf" else "reading"
    with stage(f"{what} {checkpoint.name}", progress):
        return load_checkpoint(checkpoint)


def _write_artifact(ckpt: Checkpoint, hp: Hparams, config: ExportConfig,
                    draft_ckpt: DraftCheckpoint | None, out: Path, progress: bool) -> Manifest:
    max_context = config.resolved_max_context(hp.max_position_embeddings)
    with WeightStore(out) as store:
        model, embeddings = make_target_graph(
            hp, ckpt.tensors, store, config.dtype, config.resolved_max_cells, max_context,
            config.taps, progress, config.quantize, config.accuracy_level)
        drafted = None if draft_ckpt is None else export_draft(
            draft_ckpt, hp, embeddings, store, out, dtype=config.dtype,
            max_cells=config.resolved_max_cells, max_context=max_context,
            accuracy_level=config.accuracy_level)
    onnx.save(model, str(out / TARGET_GRAPH))
    if ckpt.tokenizer_json is not None:
        (out / artifact.TOKENIZER_NAME).write_text(ckpt.tokenizer_json)
    manifest = make_manifest(ckpt, hp, config)
    graphs = write_sampler_graphs(out, hp.vocab_size)
    manifest = dataclasses.replace(manifest, graphs=graphs)
    if drafted is not None:
        manifest = dataclasses.replace(manifest, draft=drafted[0], draft_cache=drafted[1])
    manifest.save(out)
    return manifest


def _check_tokenizer(ckpt: Checkpoint, hp: Hparams) -> None:
    """The tokenizer must load and fit the vocabulary; the chat template must render a
    conversation in the sandbox (a hostile template is refused here, not at first use)."""
    if ckpt.tokenizer_json is not None:
        from tokenizers import Tokenizer

        try:
            size = Tokenizer.from_str(ckpt.tokenizer_json).get_vocab_size(with_added_tokens=True)
        except Exception as error:  # tokenizers raises plain Exception on a bad file
            raise InvalidCheckpoint(f"{ckpt.name}: tokenizer.json is not a tokenizer "
                                    f"({str(error)[:80]})") from error
        if size > hp.vocab_size:
            raise InvalidCheckpoint(f"{ckpt.name}: tokenizer.json has {size} tokens, more than "
                                    f"the model's vocabulary of {hp.vocab_size}")
    if ckpt.chat_template:
        problem = chat_template_problem(ckpt.chat_template)
        if problem is not None:
            raise InvalidCheckpoint(f"{ckpt.name}: chat template: {problem}")


def _with_draft_taps(config: ExportConfig, draft: DraftCheckpoint | None) -> ExportConfig:
    """The target must return exactly the draft's taps, in the draft's order."""
    if draft is None:
        return config
    taps = draft.spec.tap_layer_ids
    if config.taps and tuple(config.taps) != tuple(taps):
        raise InvalidArgument(f"taps {list(config.taps)}: the draft reads layers {list(taps)}; "
                              "leave taps out when exporting a draft")
    return dataclasses.replace(config, taps=tuple(taps))


def make_manifest(ckpt: Checkpoint, hp: Hparams, config: ExportConfig) -> Manifest:
    """The manifest of a target-only artifact exported with `config`."""
    model = ModelInfo(
        architecture=hp.spec.key,
        vocab_size=hp.vocab_size,
        hidden_size=hp.hidden_size,
        num_layers=hp.num_layers,
        num_heads=hp.num_heads,
        dtype=config.dtype,
        rope_theta=hp.rope_theta,
        rope_scaling=hp.rope_scaling,
        bos_token_id=hp.bos_token_id,
        eos_token_ids=hp.eos_token_ids,
        tokenizer=artifact.TOKENIZER_NAME if ckpt.tokenizer_json is not None else None,
        chat_template=ckpt.chat_template,
        name=ckpt.name,
    )
    return Manifest(
        model=model,
        target_cache=tuple(LayerCache(hp.num_kv_heads, hp.head_dim, window)
                           for window in hp.windows),
        max_cells=config.resolved_max_cells,
        max_context=config.resolved_max_context(hp.max_position_embeddings),
        target=TargetMethod(TARGET_GRAPH, config.static_widths, config.dynamic_width,
                            config.taps, config.batch_buckets, config.quantize),
    )


def _check_against_model(config: ExportConfig, hp: Hparams) -> None:
    for layer in config.taps:
        if layer >= hp.num_layers:
            raise InvalidArgument(f"taps: layer {layer} outside 0..{hp.num_layers - 1}")
    max_context = config.resolved_max_context(hp.max_position_embeddings)
    if max_context > hp.max_position_embeddings:
        raise InvalidArgument(f"max_context {max_context}: the model was trained for "
                              f"{hp.max_position_embeddings} positions")


def _check_out(out: Path, overwrite: bool) -> Path:
    """Refuse an `out` that is a file, or a non-empty folder that may not be replaced."""
    if out.exists() and not out.is_dir():
        raise InvalidArgument(f"out {out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise InvalidArgument(f"out {out}: folder is not empty (pass overwrite=True)")
        if not (out / artifact.MANIFEST_NAME).is_file():
            raise InvalidArgument(
                f"out {out}: not empty and not a cellspec artifact; refusing to overwrite it")
    return out
