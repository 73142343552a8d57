"""Folders written whole or not at all: build in a temporary sibling, rename into place.

A folder under its final name is therefore always complete, whatever interrupted the writer (an
error, Ctrl-C, a killed process). A killed writer can leave a `.partial-*` sibling behind; it is
never read, and `cellspec cache clear` removes those of the cache.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMP_PREFIX = ".partial-"


@contextmanager
def staged_folder(final: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a new empty sibling of `final` to write into. When the block completes, it takes
    `final`'s name: a missing or empty `final` is simply taken; an existing one is swapped out
    and deleted when `replace` (else FileExistsError). When the block raises, the sibling is
    deleted and `final` is left exactly as it was."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError as error:  # a file stands where a folder of the path should be
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(final)) from error
    temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{final.name}-", dir=final.parent))
    try:
        temp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
        yield temp
        move_into_place(temp, final, replace=replace)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def move_into_place(temp: Path, final: Path, *, replace: bool) -> None:
    """Rename `temp` to `final`; the old `final` (when `replace`) is deleted only afterwards and
    is put back if the rename fails."""
    if final.is_dir() and not any(final.iterdir()):
        final.rmdir()
    old = None
    if final.exists():
        if not replace:
            raise FileExistsError(f"{final}: exists")
        old = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{final.name}-old-", dir=final.parent))
        os.replace(final, old)  # `old` is an empty folder: the rename replaces it
    try:
        temp.rename(final)
    except OSError:
        if old is not None:
            old.rename(final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def partial_folders(root: Path) -> list[Path]:
    """The `.partial-*` folders under `root` that interrupted writers left behind."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(TEMP_PREFIX) and p.is_dir())
