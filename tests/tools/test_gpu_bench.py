"""tools/gpu_bench.py's host-side helpers (the GPU runs themselves are measured, not tested)."""

import os

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


def test_cycle_timeline_splits_plain_steps_into_busy_and_idle_time():
    """tools/cycle_timeline.py's summary of plain decode steps (gpu_bench.py dflash --timeline's
    yardstick): a step from one run's end to the next's, its busy time and the device's idle
    time before it (0 where the run was queued before the last one ended)."""
    from tools.cycle_timeline import step_spans

    spans = [("target", 0.0, 1.0), ("target", 1.2, 2.0), ("target", 2.5, 3.4),
             ("target", 3.3, 4.0)]
    assert step_spans(spans) == {"steps": 3, "step_ms": pytest.approx(1.0),
                                 "busy_ms": pytest.approx(0.8),
                                 "idle_before_ms": pytest.approx(0.2)}
    assert step_spans(spans[:1]) == {"steps": 0}


def test_cycle_timeline_splits_each_request_into_start_rounds_and_end():
    """tools/cycle_timeline.py's per-prompt breakdown: a request's runs between its call and
    return marks; the time before its first run, the prefill, the start up to the first verify
    (or for plain decoding the first decode step) and the device's busy time in it, the time
    after the last run; medians over the prompts."""
    from tools.cycle_timeline import prompt_phases

    speculative = [("call", 0.0, 0.0), ("target", 0.5, 2.5), ("drain", 2.6, 2.8),
                   ("block", 3.0, 3.2), ("verify", 3.5, 4.5), ("drain", 4.5, 4.6),
                   ("block", 4.6, 4.7), ("verify", 4.8, 5.8), ("return", 6.3, 6.3)]
    slower = [("call", 10.0, 10.0), ("target", 11.0, 13.0), ("drain", 13.0, 13.2),
              ("block", 13.2, 13.4), ("verify", 13.4, 14.4), ("return", 15.4, 15.4)]
    phases = prompt_phases([speculative, slower, [("call", 20.0, 20.0), ("return", 20.1, 20.1)]])
    assert phases == pytest.approx({
        "request_ms": 5.85, "before_first_run_ms": 0.75, "prefill_busy_ms": 2.0,
        "start_ms": 3.45, "start_busy_ms": 2.4, "after_last_run_ms": 0.75, "busy_ms": 4.0,
        "runs": 5.5, "start_idle_before_drain_ms": 0.05, "start_idle_before_block_ms": 0.1,
        "start_idle_before_verify_ms": 0.15})
    plain = [("call", 0.0, 0.0), ("target", 0.2, 2.2), ("target", 2.4, 3.2),
             ("target", 3.2, 4.0), ("return", 4.5, 4.5)]
    assert prompt_phases([plain]) == pytest.approx({
        "request_ms": 4.5, "before_first_run_ms": 0.2, "prefill_busy_ms": 2.0, "start_ms": 2.4,
        "start_busy_ms": 2.0, "after_last_run_ms": 0.5, "busy_ms": 3.6, "runs": 3,
        "start_idle_before_target_ms": 0.2})


def test_paired_runs_alternate_the_two_and_give_their_ratios():
    """gpu_bench.py smollm2 --paired: every batch of prompts by plain and speculative decoding
    in turn, the first of the two alternating; rates from whole calls and from after each
    call's first tokens (on_prefill), spec over plain overall and as the median of the
    batches, and the batches whose answers agreed. A fake clock: plain takes 1 s to its first
    tokens and 9 s more, speculation 1 + 3 (+ 2 on its second batch)."""
    from types import SimpleNamespace

    from tools.gpu_bench import paired_runs

    now, calls = [0.0], []

    class Fake:
        def __init__(self, speculation, first, rest):
            self.speculation, self.first, self.rest, self.batches = speculation, first, rest, 0

        def generate(self, prompts, params, on_prefill):
            calls.append((self.speculation, tuple(prompts)))
            now[0] += self.first
            on_prefill(len(prompts), len(prompts))
            now[0] += self.rest[self.batches % len(self.rest)]
            self.batches += 1
            answer = [7, 8] if self.speculation and prompts == ["c"] else [7, 8, 9]
            return [SimpleNamespace(token_ids=answer) for _ in prompts]

    llms = {False: Fake(False, 1.0, [9.0]), True: Fake(True, 1.0, [3.0, 5.0])}
    rates, ratio = paired_runs(llms, ["a", "b", "c"], 1, None, clock=lambda: now[0])
    assert calls == [(False, ("a",)), (True, ("a",)), (True, ("b",)), (False, ("b",)),
                     (False, ("c",)), (True, ("c",))]
    assert rates[False] == {"tokens": 9, "tokens_per_s": 9 / 30, "decode_tokens_per_s": 6 / 27,
                            "first_token_ms": 1000.0}
    assert rates[True] == {"tokens": 8, "tokens_per_s": 8 / 14, "decode_tokens_per_s": 5 / 11,
                           "first_token_ms": 1000.0}
    assert ratio == pytest.approx({
        "tokens_per_s": (8 / 14) / (9 / 30), "decode_tokens_per_s": (5 / 11) / (6 / 27),
        "median_batch_ratio": 10 / 4, "median_batch_decode_ratio": 9 / 3, "batches": 3,
        "same_answers": 2})


def test_time_decode_runs_only_the_timed_steps_inside_around(dflash_artifact):
    """`around` (dflash --kernels' profiler) holds the timed cycles and nothing else: not the
    prompt, not the warm-up cycles."""
    from cellspec.runtime.dflash import DFlashExecutor
    from tools.gpu_bench import method_calls, time_decode

    spec = DFlashExecutor.load(dflash_artifact, max_sessions=2, n_draft=3)
    seen = {}

    class Around:
        def __enter__(self):
            seen["enter"] = method_calls(spec)

        def __exit__(self, *failure):
            seen["exit"] = method_calls(spec)

    def blocks(calls: dict) -> int:
        return sum(n for name, (n, _) in calls.items() if name.startswith("draft_block"))

    row = time_decode(spec, 1, 64, 5, warmup=2, around=Around())
    assert blocks(seen["exit"]) - blocks(seen["enter"]) == 5
    assert blocks(method_calls(spec)) == blocks(seen["exit"])
    assert row["batch"] == 1 and row["step_ms"] > 0


def test_chained_steps_time_each_tokens_arrival_at_the_caller(dflash_artifact):
    """--chains k times `Executor.decode` chains with every step's tokens handed to the caller
    as they are known (on_step, as LLM.stream gets them): k - 1 intervals a timed chain, and
    the chains decode what one-step calls do."""
    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import BatchInput, Sampling
    from tools.gpu_bench import time_decode

    executor = Executor.load(dflash_artifact, max_sessions=2)
    row = time_decode(executor, 2, 64, 8, chain=4)  # 2 timed chains after a warm-up one
    assert row["chain"] == 4 and row["intervals"] == 2 * 3
    assert 0 < row["token_interval_ms"] <= row["token_interval_p90_ms"]
    sid = executor.open_session()
    executor.set_sampling(sid, Sampling(), 1)
    chained = executor.decode([BatchInput(sid, (5,), 0)], 6)[0].tokens
    executor.rewind(sid, 0)
    alone = [executor.execute([BatchInput(sid, (5,), 0)])[0].token]
    for _ in range(5):
        alone.append(executor.execute([BatchInput(sid, (alone[-1],), executor.pos(sid))])[0]
                     .token)
    assert list(chained) == alone


def test_kernel_rows_are_launches_and_microseconds_a_run_longest_first():
    import torch

    from tools.gpu_bench import kernel_rows

    class Event:
        def __init__(self, name, us, device=torch.autograd.DeviceType.CUDA):
            self.name, self.device_time, self.device_type = name, us, device

    events = [Event("gemm", 10.0), Event("attn", 30.0), Event("gemm", 14.0),
              Event("host_op", 99.0, torch.autograd.DeviceType.CPU)]
    assert kernel_rows(events, 2) == [("attn", 0.5, 15.0), ("gemm", 1.0, 12.0)]


def test_kernel_tails_count_what_each_kernel_adds_to_the_timeline():
    """A kernel launched before its predecessor ends (programmatic dependent launch) counts only
    from that end; a kernel inside another's span adds nothing; gaps are idle time."""
    import torch

    from tools.gpu_bench import kernel_tails

    class Event:
        def __init__(self, name, start, end, device=torch.autograd.DeviceType.CUDA):
            self.name, self.device_type = name, device
            self.time_range = type("Interval", (), {"start": start, "end": end})()

    events = [Event("gemm", 0.0, 10.0), Event("combine", 4.0, 14.0),  # waited 6 us of its 10
              Event("tiny", 5.0, 6.0), Event("gemm", 20.0, 30.0),  # 6 us idle before
              Event("host_op", 0.0, 99.0, torch.autograd.DeviceType.CPU)]
    rows, idle = kernel_tails(events, 2)
    assert rows == [("gemm", 1.0, 10.0), ("combine", 0.5, 2.0), ("tiny", 0.5, 0.0)]
    assert idle == 3.0


def test_a_cycles_floor_counts_each_graphs_weights_once_and_no_gathered_embedding(
        dflash_artifact):
    """read_bytes against the checkpoints themselves: a target step reads every target weight
    but the embedding it gathers from; a cycle adds the draft's every weight, its k and v
    projections (and k norms) again for the context's keys, and the target's head again."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tools.gpu_bench import cycle_floor_over_step, read_bytes

    root = dflash_artifact.parent
    target = AutoModelForCausalLM.from_pretrained(root / "target", dtype=torch.float32)
    params = dict(target.named_parameters())
    assert "lm_head.weight" in params  # untied: the embedding is only gathered from
    step = 4 * sum(p.numel() for name, p in params.items() if "embed_tokens" not in name)
    assert read_bytes(dflash_artifact / "target.onnx") == step
    draft = {name: t for file in sorted((root / "draft").glob("*.safetensors"))
             for name, t in load_file(file).items()}
    again = [t for name, t in draft.items() if name.endswith(
        ("k_proj.weight", "v_proj.weight", "k_norm.weight"))]
    cycle = step + 4 * (sum(t.numel() for t in [*draft.values(), *again])
                        + params["lm_head.weight"].numel())
    assert read_bytes(dflash_artifact / "draft_block.onnx") + read_bytes(
        dflash_artifact / "draft_context.onnx") == cycle - step
    assert cycle_floor_over_step(dflash_artifact) == pytest.approx(cycle / step)


def test_tree_shapes_parse_nodes_and_choices_and_refuse_the_rest():
    """dflash's and smollm2's --tree-nodes: T or T:C (each row's first C choices); dflash takes
    0 (chains) or trees of 2..15 proposals with 1..TOP_K choices, smollm2 leaves the checks to
    the LLM and keeps its default where the option is not given."""
    import argparse

    from tools.gpu_bench import dflash_trees, smollm2_trees

    assert dflash_trees(argparse.Namespace(tree_nodes="0,15,15:1")) == [
        (0, None), (15, None), (15, 1)]
    for bad in ["1", "16", "0:1", "15:0", "15:9", "x", "15:"]:
        with pytest.raises(SystemExit, match="--tree-nodes"):
            dflash_trees(argparse.Namespace(tree_nodes=bad))
    assert smollm2_trees(argparse.Namespace(tree_nodes="0,7,15:2")) == [
        (0, None), (7, None), (15, 2)]
    assert smollm2_trees(argparse.Namespace(tree_nodes=None)) == [None]
    with pytest.raises(SystemExit, match="expected T or T:C"):
        smollm2_trees(argparse.Namespace(tree_nodes="15:x"))


def test_summarize_gives_a_line_per_row_and_the_messages_not_the_tracebacks():
    """`gpu_bench.py summarize`: a JSON row as its fields (floats rounded, per-call dicts as
    their figures, a smollm2 row's calls made at most 100 times left out), a flips row after
    its mode, messages cut to the width, indented lines and plugin notices dropped."""
    from tools.gpu_bench import summarize

    log = [
        '[dflash C] plain step at batch 1: 5.707 ms\n',
        '{"shape": "C", "batch": 1, "tree_choices": null, "cycle_ms": 7.4219855, '
        '"ms_per_call": {"draft_block [1x16]": 1.32995, "static 1x16": 6.2790001}}\n',
        '{"speculation": true, "tau": 3.465078, "host_probe_ms": [6.4064, 4.7275], '
        '"ms_per_call": {"verify": {"calls": 900, "ms_per_call": 0.51234}, '
        '"prefill": {"calls": 64, "ms_per_call": 3.0}}, "answers": [[1, 2], [3]]}\n',
        'greedy {"flipped": 3, "of": 200}\n',
        'Traceback (most recent call last):\n',
        '  File "x.py", line 1, in <module>\n',
        '2026 plugin EP notice\n',
        'RuntimeError: ' + 'x' * 500 + '\n',
        'a message with {braces} in it\n',
    ]
    assert list(summarize(log, width=40)) == [
        "[dflash C] plain step at batch 1: 5.707 ",
        "shape=C batch=1 tree_choices=None cycle_ms=7.422 ms_per_call={'draft_block [1x16]': "
        "1.33, 'static 1x16': 6.279}",
        "speculation=True tau=3.465 host_probe_ms=[6.406, 4.728] ms_per_call={'verify': 0.512}",
        "greedy flipped=3 of=200",
        "Traceback (most recent call last):",
        "RuntimeError: " + "x" * 26,
        "a message with {braces} in it",
    ]


def test_projection_forms_time_each_library_once_or_per_tiling_and_refuse_unknown_ones(
        monkeypatch):
    from tools.gpu_bench import projection_forms, set_row_tiling

    assert projection_forms(["row", "row-old"], "") == [
        ("cublas", "row", None), ("row", "row", None), ("row-old", "row-old", None)]
    assert projection_forms(["row"], "choice, g,4,0") == [
        ("cublas", "row", None), ("row@choice", "row", "choice"), ("row@g", "row", "g"),
        ("row@4", "row", "4"), ("row@0", "row", "0")]
    with pytest.raises(SystemExit, match="unknown \\['1', 'wide'\\]"):
        projection_forms(["row"], "choice,1,wide")
    monkeypatch.setenv("CELLSPEC_ROW_WIDE", "2")
    set_row_tiling(None)
    assert os.environ["CELLSPEC_ROW_WIDE"] == "2"
    set_row_tiling("0")
    assert os.environ["CELLSPEC_ROW_WIDE"] == "0"
    set_row_tiling("choice")
    assert "CELLSPEC_ROW_WIDE" not in os.environ
