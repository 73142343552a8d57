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
            if content is None:
                path.unlink()
            elif isinstance(content, bytes):
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


def test_a_missing_draft_is_named_before_the_checkpoint_is_read(checkpoint, tmp_path,
                                                                monkeypatch):
    def read(*args):
        raise AssertionError("the checkpoint was read first")

    monkeypatch.setattr(cellspec.export, "_read", read)
    with pytest.raises(InvalidCheckpoint, match="nope: no such file or folder"):
        export(checkpoint, tmp_path / "artifact", SMALL, progress=False,
               draft=tmp_path / "nope")
    assert not (tmp_path / "artifact").exists()


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


HOSTILE_TEMPLATE = "{{ ''.__class__.__mro__[1].__subclasses__() }}"


def safetensors(checkpoint: Path) -> bytes:
    return (checkpoint / "model.safetensors").read_bytes()


@pytest.mark.parametrize("files, message", [
    ({"model.safetensors": b""}, "model.safetensors"),
    ({"model.safetensors": "cut:4"}, "model.safetensors"),
    ({"model.safetensors": "cut:100"}, "model.safetensors"),
    ({"model.safetensors": "cut:half"}, "model.safetensors"),
    ({"model.safetensors": b"\xff" * 1000}, "model.safetensors"),
    ({"model.safetensors": (2**62).to_bytes(8, "little") + b"{}"}, "model.safetensors"),
    ({"model.safetensors.index.json": '{"weight_map": {"model.norm.weight": 5}}'},
     "weight_map"),
    ({"model.safetensors.index.json": '{"weight_map": {"model.norm.weight": "a.st"}}',
      "a.st": b""}, "a.st"),
    ({"model.safetensors.index.json": "[" * 100_000 + "]" * 100_000}, "index.json"),
    ({"config.json": "[" * 100_000 + "]" * 100_000}, "config.json"),
    ({"tokenizer.json": b"\xff\xfe{}"}, "tokenizer.json"),
    ({"tokenizer.json": "{"}, "tokenizer.json"),
    ({"tokenizer.json": "{}"}, "tokenizer.json"),
    ({"tokenizer.json": "[]"}, "tokenizer.json"),
    ({"chat_template.jinja": b"\xff\xfe"}, "chat_template.jinja"),
    ({"chat_template.jinja": "{% for %}"}, "chat template"),
    ({"chat_template.jinja": HOSTILE_TEMPLATE}, "chat template.*__class__"),
    ({"chat_template.jinja": "{{ foo() }}"}, "chat template.*foo"),
    ({"chat_template.jinja": "{{ raise_exception('no system role') }}"},
     "chat template.*no system role"),
    ({"chat_template.jinja": "{{ messages[0]['content'] + 1 }}"}, "chat template"),
    ({"chat_template.jinja": None, "tokenizer_config.json": '{"chat_template": 5}'},
     "chat_template"),
    ({"chat_template.jinja": None, "tokenizer_config.json": '{"chat_template": [5]}'},
     "chat_template"),
])
def test_a_broken_checkpoint_file_is_named(checkpoint, edited, tmp_path, files, message):
    data = safetensors(checkpoint)
    cuts = {"cut:4": data[:4], "cut:100": data[:100], "cut:half": data[:len(data) // 2]}
    files = {name: cuts.get(content, content) if isinstance(content, str) else content
             for name, content in files.items()}
    if "model.safetensors.index.json" in files:
        files.setdefault("model.safetensors", None)
    with pytest.raises(InvalidCheckpoint, match=message):
        export(edited(files=files), tmp_path / "out", SMALL, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_hostile_template_in_an_artifact_is_one_line_at_load(checkpoint, tmp_path, capsys):
    from cellspec import cli
    from cellspec.errors import InvalidArtifact
    from cellspec.llm import LLM

    out = tmp_path / "artifact"
    export(checkpoint, out, SMALL, progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["model"]["chat_template"] = HOSTILE_TEMPLATE
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InvalidArtifact, match="chat template.*__class__"):
        LLM(out, max_sessions=1)
    assert LLM(out, max_sessions=1, chat=False).generate("hi")[0].finish_reason
    assert cli.main(["generate", "hi", "--model", str(out), "--max-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chat template" in err and "__class__" in err, err
