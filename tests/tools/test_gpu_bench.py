"""tools/gpu_bench.py's host-side helpers (the GPU runs themselves are measured, not tested)."""

import pytest

from tools.gpu_bench import agreement


def test_agreement_counts_equal_answers_and_each_first_difference():
    ours = [[5, 6, 7, 2], [5, 6], [5, 6, 7], [9], [1, 2, 3]]
    theirs = [[5, 6, 7, 2], [5, 8], [5, 6], [9], [4, 2, 3]]
    assert agreement(ours, theirs) == {"equal": 2, "of": 5,
                                       "first_difference": [None, 1, 2, None, 0]}


def test_agreement_refuses_answers_to_other_prompts():
    with pytest.raises(ValueError, match="2 answers against the peer's 1"):
        agreement([[1], [2]], [[1]])


def test_cycle_timeline_splits_rounds_into_busy_and_idle_time():
    """tools/cycle_timeline.py's summary of a stream's runs (kind, start ms, end ms): rounds
    from one verify's end to the next with a drain and a block between, each run's busy time
    and the device's idle time before it (0 where it started at once); a prompt's prefill and
    the rounds around it are left out."""
    from tools.cycle_timeline import kind_of, summarize

    spans = [("target", 0.0, 2.0), ("drain", 2.1, 2.4), ("block", 2.5, 2.6),
             ("verify", 2.7, 3.7),
             ("drain", 3.72, 3.8), ("block", 3.85, 3.95), ("verify", 4.1, 5.1),
             ("drain", 5.1, 5.2), ("block", 5.2, 5.3), ("verify", 5.5, 6.5),
             ("target", 7.0, 8.0), ("drain", 8.0, 8.1), ("block", 8.2, 8.3),
             ("verify", 8.4, 9.4)]
    summary = summarize(spans)
    assert summary["rounds"] == 2
    assert summary["round_ms"] == pytest.approx(1.4)
    assert summary["busy_ms"] == pytest.approx({"drain": 0.09, "block": 0.1, "verify": 1.0})
    assert summary["idle_before_ms"] == pytest.approx(
        {"drain": 0.01, "block": 0.025, "verify": 0.175})
    assert summarize(spans[:4]) == {"rounds": 0}
    assert [kind_of(name, width, 16) for name, width in
            [("draft_block.onnx", 16), ("draft_context.onnx", 16), ("target.onnx", 16),
             ("target.onnx", 37), ("target.onnx", None)]] == \
        ["block", "drain", "verify", "target", "target"]
