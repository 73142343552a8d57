"""`python -m cellspec`: export, generate and bench on a tiny model; errors are one line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cellspec import cli
from cellspec.errors import ExecutionFailed
from cellspec.llm import LLM, SamplingParams
from tests.tiny_chat import save_checkpoint, tiny_chat_artifact

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def artifact(tmp_path_factory):
    return tiny_chat_artifact(tmp_path_factory)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_checkpoint(tmp_path_factory.mktemp("cli-checkpoint") / "tiny")


def cellspec(*args, cache=None):
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    if cache is not None:
        env["CELLSPEC_CACHE"] = str(cache)
    return subprocess.run([sys.executable, "-m", "cellspec", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, encoding="utf-8", timeout=300, check=False)


def assert_one_line_error(result, code=2):
    assert result.returncode == code, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cellspec: error: "), result.stderr
    return lines[0]


def test_generate_streams_one_prompt(artifact):
    params = SamplingParams(max_tokens=12, temperature=0.8, seed=5)
    expected = LLM(artifact, max_sessions=1).generate("naïve café", params)[0].text
    result = cellspec("generate", "naïve café", "--model", artifact, "--max-tokens", 12,
                      "--temperature", 0.8, "--seed", 5, "--max-sessions", 1)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected + "\n"


def test_generate_prints_each_of_several_prompts(artifact):
    llm = LLM(artifact, chat=False)
    expected = llm.generate(["hello", "world"], SamplingParams(max_tokens=6))
    result = cellspec("generate", "hello", "world", "--model", artifact, "--max-tokens", 6,
                      "--no-chat")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "".join(f"[{i}] {o.prompt}\n{o.text}\n\n"
                                    for i, o in enumerate(expected))


def test_export_then_refuse_then_overwrite(checkpoint, tmp_path):
    out = tmp_path / "artifact"
    args = ("export", checkpoint, out, "--widths", "1,2,4", "--dynamic-width", 16,
            "--max-context", 64, "--max-cells", 128, "--taps", "0,1")
    result = cellspec(*args)
    assert result.returncode == 0, result.stderr
    assert "exported" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["target"]["static_widths"] == [1, 2, 4]
    assert manifest["target"]["dynamic_width"] == 16
    assert manifest["target"]["tap_layer_ids"] == [0, 1]
    assert (manifest["max_context"], manifest["max_cells"]) == (64, 128)
    assert "not empty" in assert_one_line_error(cellspec(*args))
    assert cellspec(*args, "--overwrite").returncode == 0


def test_bench_prints_tokens_per_second(artifact):
    result = cellspec("bench", "--model", artifact, "--batch", "1,2", "--tokens", 4)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all("tokens/s" in line for line in lines)
    assert lines[1].startswith("batch   2: 8 tokens")


@pytest.mark.parametrize("args, message", [
    (("cache",), "required: ACTION"),
    (("generate", "--bogus"), "unrecognized arguments: --bogus"),
    (("generate", "x", "--max-tokens", "many"), "invalid int value"),
    (("generate", "x", "--max-tokens", 0, "--model", "{art}"), "--max-tokens 0"),
    (("generate", "x", "--temperature", -1, "--model", "{art}"), "temperature -1.0"),
    (("generate", "x", "--max-sessions", 0, "--model", "{art}"), "--max-sessions 0"),
    (("generate", "x", "--model", "/no/such/model"), "/no/such/model: no such file or folder"),
    (("bench", "--batch", "0", "--model", "{art}"), "--batch"),
    (("export", "/no/such/checkpoint", "{tmp}/out"), "/no/such/checkpoint"),
    (("export", "{art}", "{tmp}/out", "--widths", "1,x"), "integers separated by commas"),
    (("export", "{art}", "{tmp}/out", "--dtype", "int3"), "invalid choice: 'int3'"),
    (("export", "{art}", "{tmp}/out", "--max-cells", 10**11), "--max-cells 100000000000"),
    (("generate", "x", "--threads", 0, "--model", "{art}"), "threads 0"),
    (("generate", "x", "--temperature", "1e-40", "--model", "{art}"), "temperature 1e-40"),
    (("generate", "x", "--speculation", "--no-speculation"), "not allowed with argument"),
    (("generate", "x", "--speculation", "--model", "{art}"), "has no draft"),
    (("generate", "x", "--max-spec-batch", 2, "--model", "{art}"),
     "--max-spec-batch is set, but speculation is off"),
    (("generate", "x", "--draft-threshold", 0.5, "--model", "{art}"),
     "--draft-threshold is set, but speculation is off"),
    (("generate", "x", "--draft-threshold", "half"), "invalid float value"),
    (("generate", "x", "--tree-nodes", 3, "--model", "{art}"),
     "--tree-nodes is set, but speculation is off"),
    (("generate", "x", "--tree-nodes", -2, "--model", "{art}"), "--tree-nodes -2"),
    (("generate", "x", "--tree-nodes", "many"), "invalid int value"),
    (("generate", "x", "--tree-choices", 9), "--tree-choices 9: expected an int in"),
    (("generate", "x", "--tree-choices", 1, "--model", "{art}"),
     "--tree-choices is set, but speculation is off"),
    (("generate", "x", "--lookup-tokens", 4, "--model", "{art}"),
     "--lookup-tokens is set, but speculation is off"),
    (("generate", "x", "--lookup-tokens", -1, "--model", "{art}"), "--lookup-tokens -1"),
    (("generate", "x", "--lookup-tokens", "some"), "invalid int value"),
])
def test_bad_arguments_print_one_line_and_exit_2(artifact, tmp_path, args, message):
    args = [str(a).format(art=artifact, tmp=tmp_path) for a in args]
    line = assert_one_line_error(cellspec(*args, cache=tmp_path / "cache"))
    assert message in line


def test_ctrl_c_exits_130_without_traceback(artifact, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(LLM, "stream", interrupted)
    assert cli.main(["generate", "x", "--model", str(artifact)]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_an_engine_failure_exits_1(artifact, monkeypatch, capsys):
    def failed(*args, **kwargs):
        raise ExecutionFailed("engine exploded", (0,))

    monkeypatch.setattr(LLM, "generate", failed)
    assert cli.main(["generate", "x", "y", "--model", str(artifact)]) == 1
    assert capsys.readouterr().err == "cellspec: error: engine exploded\n"


def test_a_refused_file_operation_is_one_line(checkpoint, tmp_path):
    line = assert_one_line_error(cellspec("export", checkpoint, "/dev/null/out"), code=1)
    assert "/dev/null/out" in line


def test_compute_capabilities_are_checked_before_exporting(checkpoint, tmp_path):
    out = tmp_path / "out"
    line = assert_one_line_error(cellspec("export", checkpoint, out, "--engines", "tensorrt-rtx",
                                          "--compute-capabilities", "sm90"))
    assert "sm90" in line or "TensorRT for RTX" in line
    assert not out.exists()


def test_int4_with_engines_is_refused_before_exporting(checkpoint, tmp_path):
    out = tmp_path / "out"
    line = assert_one_line_error(cellspec("export", checkpoint, out, "--engines", "tensorrt-rtx",
                                          "--quantize", "int4"))
    assert "int4 artifacts get no TensorRT engine" in line
    assert not out.exists()
