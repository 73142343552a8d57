"""A checkpoint as export reads it: HF config, tensors by HF name, tokenizer and chat template."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cellspec.errors import InvalidCheckpoint

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
SAFETENSORS_INDEX_NAME = "model.safetensors.index.json"


@dataclass
class Checkpoint:
    """config: the HF config.json keys. tensors: arrays by HF name (`model.embed_tokens.weight`,
    `model.layers.{i}.self_attn.q_proj.weight`, ..., `lm_head.weight` optional when tied),
    possibly loaded lazily on access. tokenizer_json: the text of tokenizer.json."""

    config: dict[str, Any]
    tensors: Mapping[str, np.ndarray]
    tokenizer_json: str | None = None
    chat_template: str | None = None
    name: str = ""


class SafetensorsTensors(Mapping[str, np.ndarray]):
    """Tensors of one or more safetensors files, each read from disk when accessed."""

    def __init__(self, files: dict[str, Path]) -> None:
        self._files = files  # tensor name -> file holding it

    def __getitem__(self, name: str) -> np.ndarray:
        from safetensors import SafetensorError, safe_open

        path = self._files[name]
        try:
            with safe_open(str(path), framework="numpy") as handle:
                return handle.get_tensor(name)
        except (OSError, ValueError, TypeError, SafetensorError) as error:
            raise InvalidCheckpoint(f"{path}: cannot read tensor {name} ({error})") from error

    def __contains__(self, name: object) -> bool:  # without reading the tensor
        return name in self._files

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def load_checkpoint(path: str | Path) -> Checkpoint:
    """A HF folder (config.json + model.safetensors or a sharded index) or a `.gguf` file."""
    path = Path(path)
    if not path.exists():
        raise InvalidCheckpoint(f"{path}: no such file or folder")
    if path.suffix == ".gguf":
        if not path.is_file():
            raise InvalidCheckpoint(f"{path}: not a GGUF file")
        from cellspec.export.gguf import load_gguf

        return load_gguf(path)
    if not path.is_dir():
        raise InvalidCheckpoint(f"{path}: not a checkpoint folder or a .gguf file")
    config = _read_json(path / CONFIG_NAME)
    tokenizer = path / "tokenizer.json"
    return Checkpoint(
        config=config,
        tensors=SafetensorsTensors(_tensor_files(path)),
        tokenizer_json=_read_text(tokenizer) if tokenizer.is_file() else None,
        chat_template=_chat_template(path),
        name=path.resolve().name,
    )


def _tensor_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it, every file's header read."""
    single, index = folder / SAFETENSORS_NAME, folder / SAFETENSORS_INDEX_NAME
    if index.is_file():
        return _indexed_tensor_files(folder, index)
    if single.is_file():
        return {name: single for name in _tensor_names(single)}
    raise InvalidCheckpoint(f"{folder}: neither {SAFETENSORS_NAME} nor {SAFETENSORS_INDEX_NAME}")


def _indexed_tensor_files(folder: Path, index: Path) -> dict[str, Path]:
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
            isinstance(shard, str) and shard for shard in weight_map.values()):
        raise InvalidCheckpoint(f"{index}: weight_map must map tensor names to shard file names")
    files = {name: folder / shard for name, shard in weight_map.items()}
    for shard in sorted(set(files.values())):
        if not shard.is_file():
            raise InvalidCheckpoint(f"{shard}: shard named by {index.name} is missing")
        held = _tensor_names(shard)
        absent = sorted(n for n, f in files.items() if f == shard and n not in held)
        if absent:
            raise InvalidCheckpoint(f"{shard}: has no tensor {absent[0]}, which {index.name} "
                                    f"places there ({len(absent)} missing in all)")
    return files


def _tensor_names(path: Path) -> set[str]:
    """The tensor names in a safetensors file's header."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            return set(handle.keys())
    except (OSError, ValueError, SafetensorError) as error:
        raise InvalidCheckpoint(f"{path}: not a safetensors file ({error})") from error


def _chat_template(folder: Path) -> str | None:
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return _read_text(jinja)
    tokenizer_config = folder / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        return None
    template = _read_json(tokenizer_config).get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        if not all(isinstance(t, dict) for t in template):
            raise InvalidCheckpoint(f"{tokenizer_config}: chat_template: expected a string or a "
                                    "list of {name, template} objects")
        template = {t.get("name"): t.get("template") for t in template}.get("default")
    if template is not None and not isinstance(template, str):
        raise InvalidCheckpoint(f"{tokenizer_config}: chat_template {str(template)[:60]!r}: "
                                "expected a string")
    return template


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidCheckpoint(f"{path}: not UTF-8 text ({error})") from error


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InvalidCheckpoint(f"{path}: missing")
    try:
        data = json.loads(_read_text(path))
    except (json.JSONDecodeError, RecursionError) as error:
        raise InvalidCheckpoint(f"{path}: not readable JSON ({str(error)[:80]})") from error
    if not isinstance(data, dict):
        raise InvalidCheckpoint(f"{path}: expected a JSON object")
    return data
