"""Where a speculative round's time goes on the device: the real SmolLM2 on `ort-cuda` with
CellAttention (the LLM's defaults: trees of 15), a CUDA event recorded on the device's stream
before and after every engine run, so the device's own timeline comes back: how long each run
kept the device busy (the verify, the drain behind it, the draft block) and how long the device
spent before each outside the runs. (That time is not the host's lateness: it holds the small
operations queued between runs, staging copies, tree kernels, commits, records' copies, about
0.12 ms of a round on an H100, which bench/gpu-2026-12-07e/op_timeline.py brackets one by one;
a round took 200 us of busy waiting added to the host's side without slowing down,
bench/gpu-2026-12-07e/host_delay.py. bench/NOTES.md, 2026-12-07, sixteenth sitting.)

    python tools/cycle_timeline.py --draft DRAFT [--prompts 8] [--tokens 96] [--orders prefill,walk]
        [--plain] [--work DIR] [--out FILE]

Each run is bracketed on the stream by events recorded just before and after its
`run_with_iobinding`, so a run's span is its kernels (its staging copies and the commit after
it fall in the gaps, a few microseconds each). A round is the span from one verify's end to
the next's; per round, the medians of: each kind of run's device time, the time before it
outside runs (`idle_before_ms`: the small operations queued before it, and any wait for the
host), and the round. Recording the events adds a few microseconds of host time a run.

Each prompt (generated alone) is also bracketed by events recorded at `generate`'s call and
after its return, so `prompts` gives where a request's time goes outside its rounds, as medians
over the prompts: the whole request on the device's clock; the time before its first run (the
host's tokenizing, opening and planning), the prefill's own time, the start (from the call to
the first verify's start: prefill, draft context, first block and the gaps between), the
rounds, the end (from the last run's end to the return), and in the start the device's idle
time before each kind of run after the prefill (`start_idle_before_KIND_ms`: the prompt's drain,
the first block, the first verify). `--plain` adds the same
breakdown for plain decoding (its "start": the call to the first decode step's start).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def kind_of(name: str, width: int | None, verify_width: int) -> str:
    """A run's kind by its graph and its token width."""
    if name.startswith("draft_block"):
        return "block"
    if name.startswith("draft_context"):
        return "drain"
    return "verify" if width == verify_width else "target"


def summarize(spans: list[tuple[str, float, float]]) -> dict:
    """Rounds from (kind, start ms, end ms) runs in stream order: from a verify's end to the
    next verify's end, with a drain and a draft block between (rounds with anything else, a
    prompt's end and the next one's prefill, are left out); medians of the round, of each
    kind's busy time and of the device's idle time before each."""
    verifies = [i for i, span in enumerate(spans) if span[0] == "verify"]
    busy: dict[str, list[float]] = {}
    idle: dict[str, list[float]] = {}
    rounds = []
    for a, b in zip(verifies, verifies[1:]):
        if sorted(span[0] for span in spans[a + 1: b]) != ["block", "drain"]:
            continue
        rounds.append(spans[b][2] - spans[a][2])
        previous_end = spans[a][2]
        for kind, start_ms, end_ms in spans[a + 1: b + 1]:
            busy.setdefault(kind, []).append(end_ms - start_ms)
            idle.setdefault(kind, []).append(max(0.0, start_ms - previous_end))
            previous_end = end_ms
    if not rounds:
        return {"rounds": 0}
    return {"rounds": len(rounds), "round_ms": round(statistics.median(rounds), 4),
            "busy_ms": {k: round(statistics.median(v), 4) for k, v in busy.items()},
            "idle_before_ms": {k: round(statistics.median(v), 4) for k, v in idle.items()}}


def prompt_phases(prompts: list[list[tuple[str, float, float]]]) -> dict:
    """Medians over prompts of where a request's time goes: each prompt's runs as (kind, start
    ms, end ms) between a ("call", t, t) and a ("return", t, t) mark, in stream order."""
    rows: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        rows.setdefault(key, []).append(value)

    for spans in prompts:
        (_, called, _), (_, returned, _) = spans[0], spans[-1]
        runs = spans[1:-1]
        if not runs:
            continue
        add("request_ms", returned - called)
        add("before_first_run_ms", runs[0][1] - called)
        add("prefill_busy_ms", runs[0][2] - runs[0][1])
        steps = [i for i, span in enumerate(runs) if span[0] == "verify"] or [
            i for i, span in enumerate(runs[1:], 1) if span[0] == "target"]
        first = steps[0] if steps else len(runs) - 1
        add("start_ms", runs[first][1] - called)
        add("start_busy_ms", sum(end - begin for _, begin, end in runs[:first]))
        seen = set()  # the device's idle time before each kind's first run after the prefill
        for (_, _, previous_end), (kind, begin, _) in zip(runs[:first], runs[1:first + 1]):
            if kind not in seen:
                seen.add(kind)
                add(f"start_idle_before_{kind}_ms", max(0.0, begin - previous_end))
        add("after_last_run_ms", returned - max(end for _, _, end in runs))
        add("busy_ms", sum(end - begin for _, begin, end in runs))
        add("runs", len(runs))
    return {key: round(statistics.median(values), 4) for key, values in rows.items()}


def bracketing(original, marks: list):
    """DeviceEngine.run wrapped so that each run appends (graph file name, its tokens' width or
    None, a CUDA event recorded before it, one after it) to `marks`, the events on the
    device's stream. (run, not _run: with CELLSPEC_CUDA_GRAPHS=own, _run also runs inside a
    stream capture, where an event cannot be recorded.)"""

    def bracketed(self, graph_key):
        device = self.device
        start = device.cuda.Event()
        start.record(device.stream)
        original(self, graph_key)
        end = device.cuda.Event()
        end.record(device.stream)
        feeds = self.step_key[0] if self.step_key else ()
        tokens = next((shape for name, shape, _ in feeds if name == "tokens"), None)
        marks.append((self.path.name, None if tokens is None else int(tokens[-1]), start, end))

    return bracketed


def step_spans(spans: list[tuple[str, float, float]]) -> dict:
    """Plain decode steps from (kind, start ms, end ms) target runs in stream order: medians of a
    step (from one run's end to the next's), of its busy time and of the device's idle time
    before it."""
    steps, busy, idle = [], [], []
    for (_, _, previous_end), (_, start_ms, end_ms) in zip(spans, spans[1:]):
        steps.append(end_ms - previous_end)
        busy.append(end_ms - start_ms)
        idle.append(max(0.0, start_ms - previous_end))
    if not steps:
        return {"steps": 0}
    return {"steps": len(steps), "step_ms": round(statistics.median(steps), 4),
            "busy_ms": round(statistics.median(busy), 4),
            "idle_before_ms": round(statistics.median(idle), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--orders", default="prefill,walk")
    parser.add_argument("--plain", action="store_true", help="also plain decoding's per-prompt "
                        "breakdown (speculation off), after the orders")
    parser.add_argument("--work", type=Path, default=Path("/tmp/cellspec-timeline"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=Path, help="also a cProfile of each order's timed "
                        "generation (host time by function, ONNX Runtime's and PyCUDA's calls "
                        "included), written to PROFILE-ORDER.txt")
    args = parser.parse_args()

    import os

    os.environ.setdefault("CELLSPEC_CUDA_ATTENTION", "cell")
    from cellspec.llm import LLM, SamplingParams
    from cellspec.runtime import device_engine
    from tools.gpu_bench import cycle_orders, export_real, held_out_prompts, set_cycle_order

    orders = cycle_orders(args)  # (refused before the export)
    folder = export_real(args)
    prompts = held_out_prompts(args.prompts)
    marks: list[tuple[str, int | None, object, object]] = []
    original = device_engine.DeviceEngine.run
    bracketed = bracketing(original, marks)

    results = []
    for order in orders + (["plain"] if args.plain else []):
        llm = LLM(folder, backend="ort-cuda", max_sessions=8, speculation=order != "plain")
        if order != "plain":
            set_cycle_order(llm.executor, order)
        params = SamplingParams(max_tokens=args.tokens)
        llm.generate(prompts[:1], SamplingParams(max_tokens=8))  # capture the graphs
        device_engine.DeviceEngine.run = bracketed
        marks.clear()
        profile = cProfile.Profile() if args.profile else None
        start = time.perf_counter()
        if profile:
            profile.enable()
        device = llm.executor.backend.device
        tokens = 0
        for prompt in prompts:  # each request bracketed by events at its call and its return
            called = device.cuda.Event()
            called.record(device.stream)
            marks.append(("call", None, called, called))
            tokens += sum(len(o.token_ids) for o in llm.generate([prompt], params))
            returned = device.cuda.Event()
            returned.record(device.stream)
            marks.append(("return", None, returned, returned))
        if profile:
            profile.disable()
        seconds = time.perf_counter() - start
        if profile:
            text = io.StringIO()
            for key in ("tottime", "cumulative"):
                pstats.Stats(profile, stream=text).sort_stats(key).print_stats(50)
            path = args.profile.with_name(f"{args.profile.name}-{order}-{len(results)}.txt")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.getvalue())
        device_engine.DeviceEngine.run = original
        llm.executor.backend.device.synchronize()
        base = marks[0][2]
        verify_width = (llm.executor.tree_nodes + 1 if order != "plain" else -1)
        spans = [(name if name in ("call", "return") else kind_of(name, width, verify_width),
                  start.time_since(base), end.time_since(base))
                 for name, width, start, end in marks]
        per_prompt, current = [], []
        for span in spans:
            current.append(span)
            if span[0] == "return":
                per_prompt.append(current)
                current = []
        runs = [span for span in spans if span[0] not in ("call", "return")]
        row = {"order": order, "tokens_per_s": tokens / seconds, **summarize(runs),
               "prompts": prompt_phases(per_prompt)}
        print(json.dumps(row), flush=True)
        results.append(row)
        del llm
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
