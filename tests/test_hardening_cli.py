"""A new user's first hour with the command line: usage, help, sizing, flags in messages."""

import argparse
import os
import time

import pytest

import cellspec
import cellspec.llm
from cellspec import cli
from cellspec.errors import InvalidArgument
from cellspec.export import ExportConfig
from cellspec.llm import LLM, SamplingParams
from tests.tiny_chat import save_checkpoint, tiny_chat_artifact

LONG_PROMPT = "the quick brown fox jumps over the lazy dog " * 8  # 127 < tokens < 256


@pytest.fixture(scope="session")
def artifact(tmp_path_factory):
    return tiny_chat_artifact(tmp_path_factory)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_checkpoint(tmp_path_factory.mktemp("cli-first-hour") / "tiny")


def run(capsys, *args):
    """cli.main in process: (exit code, stdout, stderr)."""
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(capsys, *args, code=2):
    got, _, err = run(capsys, *args)
    assert got == code, err
    assert err.count("\n") == 1 and err.startswith("cellspec: error: "), err
    return err


def test_no_command_shows_usage_and_the_commands(capsys):
    code, out, err = run(capsys)
    assert code == 2 and out == ""
    assert err.startswith("usage: cellspec")
    for command in ("export", "generate", "bench", "cache"):
        assert command in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"cellspec {cellspec.__version__}\n"


def subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from subparsers(sub)


def test_every_option_says_what_it_does_and_its_default():
    for name, parser in subparsers(cli.make_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{name} {action.dest}: no help"
            is_flag = action.nargs == 0
            if action.option_strings and not is_flag:
                assert "default" in action.help, f"{name} {action.dest}: no default"


def test_backend_takes_only_the_known_backends(capsys):
    from cellspec.runtime.backend import BACKENDS

    err = one_line_error(capsys, "generate", "hi", "--backend", "tpu")
    assert "invalid choice: 'tpu'" in err and all(b in err for b in BACKENDS)


def test_a_missing_model_is_named_as_missing(capsys, tmp_path):
    err = one_line_error(capsys, "generate", "hi", "--model", tmp_path / "nope")
    assert f"{tmp_path / 'nope'}: no such file or folder" in err


@pytest.mark.parametrize("prompt", ["", "   ", " \n\t"])
def test_an_empty_prompt_is_refused(artifact, capsys, prompt):
    llm = LLM(artifact, max_sessions=1)
    with pytest.raises(InvalidArgument, match="prompt 0: empty"):
        llm.generate(prompt)
    with pytest.raises(InvalidArgument, match="prompt 1: empty"):
        llm.generate(["hi", prompt])
    with pytest.raises(InvalidArgument, match="empty"):
        llm.stream(prompt)
    assert "empty" in one_line_error(capsys, "generate", prompt, "--model", artifact)


def test_an_empty_prompt_is_refused_before_a_first_use_export(checkpoint, tmp_path,
                                                              monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CELLSPEC_CACHE", str(cache))
    err = one_line_error(capsys, "generate", "hi", " ", "--model", checkpoint)
    assert "prompt 1: empty" in err
    assert not cache.exists() or not any(cache.iterdir())  # nothing exported


def test_one_prompt_gets_one_session_with_the_whole_budget(artifact, capsys):
    with pytest.raises(InvalidArgument, match="max_session_tokens") as refused:
        LLM(artifact, chat=False).generate(LONG_PROMPT)  # 8 sessions of 127 tokens
    assert "max_sessions" in str(refused.value)
    code, out, err = run(capsys, "generate", LONG_PROMPT, "--model", artifact, "--no-chat",
                         "--max-tokens", 4)
    assert code == 0 and out.strip(), err


def test_budget_hints_name_the_flags_on_the_command_line(artifact, capsys):
    err = one_line_error(capsys, "generate", LONG_PROMPT, "--model", artifact, "--no-chat",
                         "--max-sessions", 8)
    assert "--max-sessions" in err and "--max-session-tokens" in err
    assert "max_session" not in err.replace("--max-session", "")
    err = one_line_error(capsys, "generate", "hi", "--model", artifact,
                         "--max-session-tokens", 10**6)
    assert err.startswith("cellspec: error: --max-session-tokens 1000000 exceeds")


def record_sessions(monkeypatch):
    seen = []

    class Recording(LLM):
        def __init__(self, *args, **kwargs):
            seen.append((kwargs["max_sessions"], kwargs["max_session_tokens"]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(cellspec.llm, "LLM", Recording)
    return seen


@pytest.mark.parametrize("args, sessions", [
    (["a"], (1, 0)),
    (["a", "b", "c"], (3, 0)),
    (["x"] * 11, (8, 0)),
    (["a", "b", "--max-sessions", 1], (1, 0)),
    (["a", "--max-sessions", 4, "--max-session-tokens", 64], (4, 64)),
])
def test_sessions_are_sized_to_the_prompts(artifact, capsys, monkeypatch, args, sessions):
    seen = record_sessions(monkeypatch)
    code, _, err = run(capsys, "generate", *args, "--model", artifact, "--max-tokens", 1)
    assert code == 0, err
    assert seen == [sessions]


def test_bench_takes_the_session_flags(artifact, capsys, monkeypatch):
    seen = record_sessions(monkeypatch)
    code, out, err = run(capsys, "bench", "--model", artifact, "--batch", "1,2", "--tokens", 2)
    assert code == 0 and seen == [(2, 0)], err
    code, out, err = run(capsys, "bench", "--model", artifact, "--batch", "1,3", "--tokens", 2,
                         "--max-sessions", 2, "--max-session-tokens", 100)
    assert code == 0 and seen[-1] == (2, 100), err
    err = one_line_error(capsys, "bench", "--batch", "0,2", "--model", artifact)
    assert "--batch 0,2" in err and "(0, 2)" not in err


def test_export_messages_use_flags_not_python(checkpoint, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    err = one_line_error(capsys, "export", checkpoint, out)
    assert "--overwrite" in err and "overwrite=True" not in err
    err = one_line_error(capsys, "export", checkpoint, tmp_path / "x", "--widths", "4,2")
    assert "--widths [4, 2]" in err and "(4, 2)" not in err
    with pytest.raises(InvalidArgument, match=r"static_widths \[4, 2\]"):
        ExportConfig(static_widths=(4, 2))


def test_the_library_reports_prefill_progress(artifact):
    llm = LLM(artifact, max_sessions=2, chat=False, max_prefill_tokens=16)
    calls = []
    llm.generate([LONG_PROMPT, "hi"], SamplingParams(max_tokens=2),
                 on_prefill=lambda done, total: calls.append((done, total)))
    total = sum(len(r.prompt_token_ids) for r in llm.make_requests([LONG_PROMPT, "hi"], None))
    assert calls[-1] == (total, total) and len(calls) > 5
    assert all(a[0] < b[0] for a, b in zip(calls, calls[1:]))
    streamed = []
    list(llm.stream(LONG_PROMPT, on_prefill=lambda done, total: streamed.append((done, total))))
    single = len(llm.make_requests(LONG_PROMPT, None)[0].prompt_token_ids)
    assert streamed[-1] == (single, single)


def test_a_long_prompt_shows_prefill_progress_on_the_command_line(artifact, capsys,
                                                                 monkeypatch):
    monkeypatch.setattr(cli, "PREFILL_PROGRESS_TOKENS", 100)
    code, out, err = run(capsys, "generate", LONG_PROMPT, "--model", artifact, "--no-chat",
                         "--max-tokens", 2)
    assert code == 0 and "prefill" in err
    code, out, err = run(capsys, "generate", "hi", "--model", artifact, "--max-tokens", 2)
    assert code == 0 and err == ""


def test_a_first_export_says_what_it_does(checkpoint, tmp_path, monkeypatch, capsys):
    from cellspec.export import progress
    from cellspec.model_cache import resolve_model

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0)
    monkeypatch.setenv("CELLSPEC_CACHE", str(tmp_path / "cache"))
    config = ExportConfig(static_widths=(1, 2), dynamic_width=8, max_context=64, max_cells=128)
    folder = resolve_model(checkpoint, config, progress=True)
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith(f"cellspec: exporting tiny into {folder} (one time, ~")
    assert "reading tiny" in err and "export target" in err
    resolve_model(checkpoint, config, progress=True)
    assert capsys.readouterr().err == ""  # cached: nothing to say


def test_cache_list_and_clear(checkpoint, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CELLSPEC_CACHE", str(cache))
    code, out, _ = run(capsys, "cache", "list")
    assert code == 0 and "empty" in out
    config = ExportConfig(static_widths=(1, 2), dynamic_width=8, max_context=64, max_cells=128)
    folder = LLM(checkpoint, export_config=config, max_sessions=1).folder
    stale, fresh = cache / ".partial-tiny-abc", cache / ".partial-tiny-def"
    for partial in (stale, fresh):
        partial.mkdir()
        (partial / "weights.bin").write_bytes(b"x" * 10)
    hour_ago = time.time() - 3600
    os.utime(stale / "weights.bin", (hour_ago, hour_ago))
    (cache / "notes").mkdir()  # not an artifact: never listed, never removed
    code, out, _ = run(capsys, "cache", "list")
    lines = out.splitlines()
    assert code == 0 and any(folder.name in line and str(checkpoint) in line for line in lines)
    assert any(".partial-tiny-abc" in line and "interrupted" in line for line in lines)
    assert "MB" in out or "kB" in out
    err = one_line_error(capsys, "cache", "clear", "nope")
    assert "nope" in err and folder.name in err
    code, out, _ = run(capsys, "cache", "clear", folder.name)
    assert code == 0 and folder.name in out and not folder.exists() and stale.exists()
    code, out, _ = run(capsys, "cache", "clear")
    assert code == 0 and ".partial-tiny-abc" in out
    assert sorted(p.name for p in cache.iterdir()) == [".partial-tiny-def", "notes"]


@pytest.mark.parametrize("args, message", [
    (["generate", "x", "--stop", ""], "--stop ['']: expected non-empty strings"),
    (["generate", "caf\udce9"], "prompt: character 3 is a lone surrogate"),
    (["bench", "--tokens", 0], "--tokens 0: expected an integer >= 1"),
])
def test_more_refusals_are_one_line_in_flag_terms(artifact, capsys, args, message):
    assert message in one_line_error(capsys, *args, "--model", artifact)
