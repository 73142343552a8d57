"""What `LLM(model)` loads: an artifact folder as is, or a checkpoint exported once into a cache.

The cache folder is `$CELLSPEC_CACHE` (default `~/.cache/cellspec`) / `<name>-<hash>`, the hash
over the checkpoint's absolute path, its files' modification times and the export config, so an
edited checkpoint or a different config gets a fresh export. An export is written into a temporary
sibling folder and renamed into place only when complete (cellspec/staging.py): a folder under the
final name is always a whole artifact, whatever interrupted an earlier export.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from cellspec.artifact import FORMAT_VERSION, MANIFEST_NAME
from cellspec.errors import InvalidArgument, InvalidArtifact

if TYPE_CHECKING:
    from cellspec.export.config import ExportConfig

CACHE_ENV = "CELLSPEC_CACHE"


def resolve_model(model: str | Path | None, export_config: ExportConfig | None = None,
                  progress: bool = True) -> Path:
    """The artifact folder for `model`: an artifact, a HF checkpoint folder, a `.gguf` file, or
    None for the bundled SmolLM2-135M-Instruct GGUF; checkpoints are exported on first use."""
    if model is None:
        from cellspec.export.gguf import find_bundled_gguf

        model = find_bundled_gguf()
    if not isinstance(model, (str, Path)):
        raise InvalidArgument(f"model {model!r}: expected a path or None")
    path = Path(model).expanduser()
    if (path / MANIFEST_NAME).is_file():
        if export_config is not None:
            raise InvalidArgument(f"model {path}: an exported artifact takes no export_config")
        return path
    if not is_checkpoint(path):
        raise InvalidArgument(f"model {path}: not an artifact folder (no {MANIFEST_NAME}), a "
                              "checkpoint folder (no config.json) or a .gguf file")
    from cellspec.export.config import ExportConfig

    config = export_config if export_config is not None else ExportConfig()
    folder = cache_folder(path, config)
    if not (folder / MANIFEST_NAME).is_file():
        export_into(path, folder, config, progress)
    return folder


def is_checkpoint(path: Path) -> bool:
    if path.suffix == ".gguf":
        return path.is_file()
    return (path / "config.json").is_file()


def cache_root() -> Path:
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "cellspec"


def cache_folder(checkpoint: Path, config: ExportConfig) -> Path:
    checkpoint = checkpoint.resolve()
    files = sorted(checkpoint.iterdir()) if checkpoint.is_dir() else [checkpoint]
    stamps = [(f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file()]
    key = repr((str(checkpoint), stamps, asdict(config), FORMAT_VERSION))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    name = checkpoint.name.removesuffix(".gguf") or "model"
    return cache_root() / f"{name}-{digest}"


def export_into(checkpoint: Path, folder: Path, config: ExportConfig, progress: bool) -> None:
    """Export into `folder`, which another process may be filling at the same time."""
    from cellspec.export import export

    if folder.exists():
        raise InvalidArtifact(f"{folder}: not a whole artifact (no {MANIFEST_NAME}); remove it "
                              f"(`cellspec cache clear {folder.name}`)")
    try:
        export(checkpoint, folder, config, progress=progress)
    except FileExistsError:  # fine when another process finished the same export first
        if not (folder / MANIFEST_NAME).is_file():
            raise
