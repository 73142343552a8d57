"""Export refuses bad checkpoints with one named error, and never loses an existing artifact."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

import cellspec.export
from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export import ExportConfig, export
from tests.tiny_chat import save_checkpoint

SMALL = ExportConfig(static_widths=(1, 2), dynamic_width=8, max_context=64, max_cells=128)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_checkpoint(tmp_path_factory.mktemp("hardening") / "tiny")


@pytest.fixture
def edited(checkpoint, tmp_path):
    """edited(config_changes=..., files=...) -> a copy of the tiny checkpoint with changes."""

    def edit(config_changes=None, files=None):
        folder = Path(shutil.copytree(checkpoint, tmp_path / "edited", dirs_exist_ok=True))
        config = json.loads((folder / "config.json").read_text())
        for key, value in (config_changes or {}).items():
            if value is KeyError:
                config.pop(key, None)
            else:
                config[key] = value
        (folder / "config.json").write_text(json.dumps(config))
        for name, content in (files or {}).items():
            path = folder / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        return folder

    return edit


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_failed_overwrite_keeps_the_old_artifact(checkpoint, edited, tmp_path):
    out = tmp_path / "artifact"
    export(checkpoint, out, SMALL, progress=False)
    before = digests(out)
    broken = edited({"num_hidden_layers": 3})  # fails mid-conversion: layer 2 has no tensors
    with pytest.raises(InvalidCheckpoint, match="model.layers.2"):
        export(broken, out, SMALL, progress=False, overwrite=True)
    assert digests(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["artifact", "edited"]


def test_an_interrupted_overwrite_keeps_the_old_artifact(checkpoint, tmp_path, monkeypatch):
    out = tmp_path / "artifact"
    export(checkpoint, out, SMALL, progress=False)
    before = digests(out)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cellspec.export, "write_sampler_graphs", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export(checkpoint, out, SMALL, progress=False, overwrite=True)
    assert digests(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_a_successful_overwrite_replaces_the_artifact(checkpoint, tmp_path):
    out = tmp_path / "artifact"
    export(checkpoint, out, SMALL, progress=False)
    export(checkpoint, out, ExportConfig(static_widths=(1, 4), dynamic_width=8, max_context=64,
                                         max_cells=128), progress=False, overwrite=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["static_widths"] == [1, 4]
    assert [p.name for p in tmp_path.iterdir()] == ["artifact"]


def test_out_is_refused_before_converting(checkpoint, tmp_path):
    out = tmp_path / "artifact"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InvalidArgument, match="not empty"):
        export(checkpoint, out, SMALL, progress=False)
    with pytest.raises(InvalidArgument, match="not a cellspec artifact"):
        export(checkpoint, out, SMALL, progress=False, overwrite=True)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    export(checkpoint, empty, SMALL, progress=False)
    assert (empty / "manifest.json").is_file()


def test_a_failed_overwrite_from_the_command_line_keeps_the_old_artifact(checkpoint, edited,
                                                                        tmp_path, capsys):
    from cellspec import cli

    out = tmp_path / "artifact"
    args = ["--widths", "1,2", "--dynamic-width", "8", "--max-context", "64", "--max-cells", "128"]
    assert cli.main(["export", str(checkpoint), str(out), *args]) == 0
    before = digests(out)
    broken = edited({"num_hidden_layers": 3})
    assert cli.main(["export", str(broken), str(out), *args, "--overwrite"]) == 2
    assert "model.layers.2" in capsys.readouterr().err
    assert digests(out) == before
