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
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cellspec.artifact import FORMAT_VERSION, MANIFEST_NAME
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.staging import TEMP_PREFIX

if TYPE_CHECKING:
    from cellspec.export.config import ExportConfig

CACHE_ENV = "CELLSPEC_CACHE"
SOURCE_NAME = "cellspec-source.txt"  # the checkpoint's path, written next to the artifact
STALE_SECONDS = 600  # a partial export untouched this long was killed, not still writing


def bundled_export() -> tuple[ExportConfig, Path | None]:
    """How the bundled SmolLM2 is exported: its own Q4_1/Q8_0 blocks as they are (int4 weights,
    1.9x float32's decode speed on the CPU: bench/NOTES.md), with the shipped DFlash draft
    whether or not a run speculates. One artifact for both, because a target with a draft runs
    its attention by position on `ort-cpu` (cellspec/rewrite/attention.py) and rounds
    differently from the same target without one: with two artifacts, `speculation=False`
    changed the greedy text of 12 of 16 held-out prompts."""
    from cellspec.drafts import bundled_draft
    from cellspec.export.config import ExportConfig

    config = ExportConfig(quantize="int4", max_context=2048, max_cells=8192)
    return config, bundled_draft()


def resolve_model(model: str | Path | None, export_config: ExportConfig | None = None,
                  progress: bool = True, speculation: bool = False) -> Path:
    """The artifact folder for `model`: an artifact, a HF checkpoint folder, a `.gguf` file, or
    None for the bundled SmolLM2-135M-Instruct GGUF (exported as `bundled_export()` says unless
    `export_config` is given; `speculation` asks for its draft); checkpoints are exported on
    first use."""
    draft = None
    if model is None:
        from cellspec.export.gguf import find_bundled_gguf

        model = find_bundled_gguf()
        if export_config is None:
            export_config, draft = bundled_export()
            if speculation and draft is None:
                raise InvalidArgument("speculation=True, but this install has no bundled draft "
                                      "(cellspec/drafts)")
    if not isinstance(model, (str, Path)):
        raise InvalidArgument(f"model {model!r}: expected a path or None")
    path = Path(model).expanduser()
    if not path.exists():
        raise InvalidArgument(f"model {path}: no such file or folder")
    if (path / MANIFEST_NAME).is_file():
        if export_config is not None:
            raise InvalidArgument(f"model {path}: an exported artifact takes no export_config")
        return path
    if not is_checkpoint(path):
        raise InvalidArgument(f"model {path}: neither an artifact folder ({MANIFEST_NAME}), a "
                              "checkpoint folder (config.json) nor a .gguf file")
    from cellspec.export.config import ExportConfig

    config = export_config if export_config is not None else ExportConfig()
    folder = cache_folder(path, config, draft)
    if not (folder / MANIFEST_NAME).is_file():
        export_into(path, folder, config, progress, draft)
    return folder


def is_checkpoint(path: Path) -> bool:
    if path.suffix == ".gguf":
        return path.is_file()
    return (path / "config.json").is_file()


def cache_root() -> Path:
    root = os.environ.get(CACHE_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "cellspec"


def cache_folder(checkpoint: Path, config: ExportConfig, draft: Path | None = None) -> Path:
    """`name-hash`, the hash over the checkpoint's (and draft's) path and files, the config and
    the format version: any change gives a fresh export."""
    checkpoint = checkpoint.resolve()
    stamps = [_stamps(checkpoint)] + ([_stamps(draft.resolve())] if draft else [])
    key = repr((str(checkpoint), stamps, asdict(config), FORMAT_VERSION))
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_root() / f"{entry_name(checkpoint)}-{digest}"


def _stamps(path: Path) -> list[tuple[str, int, int]]:
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return [(f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file()]


def export_into(checkpoint: Path, folder: Path, config: ExportConfig, progress: bool,
                draft: Path | None = None) -> None:
    """Export into `folder`, which another process may be filling at the same time; with
    `progress`, say on stderr what is happening and how long it takes."""
    from cellspec.export import export

    if folder.exists():
        raise InvalidArtifact(f"{folder}: not a whole artifact (no {MANIFEST_NAME}); remove it "
                              f"(`cellspec cache clear {folder.name}`)")
    if progress:
        print(f"cellspec: exporting {entry_name(checkpoint)} into {shown(folder)} (one time, "
              f"~{estimate_export_seconds(checkpoint)} s)", file=sys.stderr, flush=True)
    try:
        export(checkpoint, folder, config, progress=progress, draft=draft)
    except FileExistsError:  # fine when another process finished the same export first
        if not (folder / MANIFEST_NAME).is_file():
            raise
    (folder / SOURCE_NAME).write_text(str(checkpoint.resolve()))


def entry_name(checkpoint: Path) -> str:
    return checkpoint.resolve().name.removesuffix(".gguf") or "model"


def estimate_export_seconds(checkpoint: Path) -> int:
    """A rough one-time cost on a small CPU: a GGUF is parsed and dequantized in Python (about
    8 MB/s), safetensors are converted at about 100 MB/s."""
    if checkpoint.is_file():
        return max(1, round(checkpoint.stat().st_size / 8e6))
    size = sum(f.stat().st_size for f in checkpoint.glob("*.safetensors"))
    return max(1, round(size / 100e6))


def shown(path: Path) -> str:
    """`path` with the home folder written as ~."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if text.startswith(home + os.sep) else text


@dataclass(frozen=True)
class CacheEntry:
    """One folder of the cache: a whole artifact, or what an interrupted export left."""

    path: Path
    num_bytes: int
    source: str  # the checkpoint it was exported from; "" when not recorded
    is_partial: bool  # a `.partial-*` folder: an export was killed, or is still writing it
    is_stale: bool  # a partial folder nothing has written to for STALE_SECONDS


def cache_entries() -> list[CacheEntry]:
    """Every artifact and partial export under the cache root; other folders are not ours."""
    root = cache_root()
    if not root.is_dir():
        return []
    entries = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        is_partial = path.name.startswith(TEMP_PREFIX)
        if not is_partial and not (path / MANIFEST_NAME).is_file():
            continue
        files = [f for f in path.rglob("*") if f.is_file()]
        newest = max((f.stat().st_mtime for f in files), default=path.stat().st_mtime)
        source = path / SOURCE_NAME
        entries.append(CacheEntry(
            path, sum(f.stat().st_size for f in files),
            source.read_text(errors="replace").strip() if source.is_file() else "",
            is_partial, is_partial and time.time() - newest > STALE_SECONDS))
    return entries


def clear_cache(name: str | None = None) -> list[Path]:
    """Remove every artifact of the cache (or those of `name`: a folder name, or the checkpoint
    name before its hash) and the stale partial exports; returns what was removed."""
    entries = cache_entries()
    chosen = [e for e in entries if not e.is_partial and (name is None or _is_named(e, name))]
    if name is not None and not chosen:
        names = ", ".join(e.path.name for e in entries if not e.is_partial) or "none"
        raise InvalidArgument(f"cache entry {name!r}: not in {cache_root()} (cached: {names})")
    chosen += [e for e in entries if e.is_stale
               and (name is None or e.path.name.startswith(f"{TEMP_PREFIX}{name}-"))]
    for entry in chosen:
        shutil.rmtree(entry.path)
    return [e.path for e in chosen]


def _is_named(entry: CacheEntry, name: str) -> bool:
    folder = entry.path.name
    return folder == name or re.fullmatch(re.escape(name) + r"-[0-9a-f]{12}", folder) is not None
