"""tools/soak.py: its differential check (speculation on against off, a request alone against
in its batch) on a short soak of the tiny chat model, and its refusals."""

import argparse
import sys
from types import SimpleNamespace

import pytest

from tools import soak


def output(token_ids, text, finish_reason="length"):
    return SimpleNamespace(token_ids=tuple(token_ids), text=text, finish_reason=finish_reason)


def test_differences_name_each_request_first_differing_field():
    got = [output([5, 6], "ab"), output([7], "c", "stop"), output([8], "d")]
    expected = [output([5, 6], "ab"), output([7], "c", "length"), output([9], "e")]
    assert soak.differences(got, expected, "check") == [
        {"check": "check", "request": 1, "field": "finish_reason", "got": "stop",
         "expected": "length"},
        {"check": "check", "request": 2, "field": "token_ids", "got": "(8,)",
         "expected": "(9,)"}]
    assert soak.differences(got, got, "check") == []
    with pytest.raises(ValueError):  # other requests: not comparable
        soak.differences(got, got[:2], "check")


def test_a_short_soak_checks_every_round_and_finds_nothing():
    report = soak.soak(argparse.Namespace(tokens=400, seed=3, differential=1.0,
                                                  bundled=False))
    assert report["rounds"] >= 2 and report["tokens"] >= 400
    assert report["differential"] == {"rounds_checked": report["rounds"], "differences": []}
    assert report["leaks"] == []
    assert all(not any(v.values()) for v in report["final"].values())


@pytest.mark.parametrize("argv", [["--differential", "1.5"], ["--differential", "-0.1"],
                                  ["--tokens", "0"]])
def test_bad_settings_are_refused(argv, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["soak.py", *argv])
    with pytest.raises(SystemExit) as refused:
        soak.main()
    assert refused.value.code == 2
    assert argv[0] in capsys.readouterr().err
