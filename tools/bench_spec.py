"""Plain vs DFlash speculative decoding on one artifact, side by side in one run.

Prints tokens/s for each, tau (tokens committed per cycle), proposals accepted per cycle, and the
cost of one cycle (drain + draft + verify + commit) over the cost of one plain decode step.

    python tools/bench_spec.py --artifact DIR [--batches 1,6] [--tokens 48] [--n-draft 15,7,3]
        [--max-spec-batch N] [--prompts N] [--repeats R] [--temperature T] [--top-p P]
    python tools/bench_spec.py --random-draft   # SmolLM2 + a random draft: tau ~ 1, pure overhead

By default one story prompt is decoded --tokens past its eos. `--prompts N` answers the first N
held-out prompts of tools/train_dflash.py's prompt set instead (categories interleaved; each
answer to its eos or --tokens), the prompts a draft's held-out tau is measured on. `--repeats R`
alternates the plain and speculative runs R times: tok/s are the medians, and the speedup column
gives the median of the R paired ratios with their range (a 2-core machine varies by 10-30%
between runs of the same configuration). `--plain-artifact DIR` times plain decoding on another
export of the model (e.g. without the draft); "same text" then compares two models.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Write a long story about a lighthouse keeper and the sea."


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, help="an artifact with a DFlash draft")
    parser.add_argument("--random-draft", action="store_true",
                        help="export SmolLM2 with a random one-layer draft to out/")
    parser.add_argument("--batches", default="1,6")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-draft", default="",
                        help="proposals per cycle to compare, e.g. 15,7,3 (default: the "
                        "draft's block size less one)")
    parser.add_argument("--plain-artifact", type=Path,
                        help="time plain decoding on this artifact instead (e.g. the same "
                        "model exported without its draft)")
    parser.add_argument("--prompts", type=int, default=0,
                        help="N > 0: the first N held-out prompts of the draft training set")
    parser.add_argument("--repeats", type=int, default=1,
                        help="alternate plain and speculative runs this many times")
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sample at this temperature (seeded: the same text either way)")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--draft-thresholds", default="",
                        help="comma-separated draft thresholds, each run with every n_draft "
                        "(0: none; default: as LLM sets it)")
    parser.add_argument("--lookup-tokens", default="",
                        help="comma-separated lookup_tokens, each run with every n_draft and "
                        "threshold (0: none; default: as LLM sets it)")
    parser.add_argument("--lookup-match", default="",
                        help="comma-separated lookup_match values, each run with every "
                        "lookup_tokens > 0 (default: the executor's)")
    parser.add_argument("--max-spec-batch", type=int,
                        help="the most sessions speculating in one step (default: LLM's, 4 on "
                        "ort-cpu)")
    args = parser.parse_args()
    if (args.artifact is None) == (not args.random_draft):
        parser.error("pass exactly one of --artifact and --random-draft")
    if args.prompts < 0 or args.repeats < 1 or args.tokens < 1:
        parser.error("--prompts must be >= 0, --repeats and --tokens >= 1")
    return args


def held_out_prompts(count: int) -> list[str]:
    """The first `count` held-out prompts of tools/train_dflash.py's prompt set, categories
    interleaved (the draft never trained on them)."""
    sys.path.insert(0, str(ROOT))
    from tools.dflash_train.prompts import held_out_texts

    return held_out_texts(count)


def random_draft_artifact() -> Path:
    out = ROOT / "out" / "smollm2-random-dflash"
    if (out / "manifest.json").is_file():
        return out
    sys.path.insert(0, str(ROOT))
    from cellspec.export import ExportConfig, export
    from cellspec.export.gguf import find_bundled_gguf
    from tests.reference.zlab_draft import write_random_draft

    draft = write_random_draft(ROOT / "out" / "random-draft", hidden=576, vocab=49152,
                               num_target_layers=30, taps=[1, 15, 28], block_size=4,
                               heads=9, kv_heads=3, head_dim=64, intermediate=1536, scale=0.02)
    export(find_bundled_gguf(), out, ExportConfig(max_context=1024, max_cells=8192), draft=draft)
    return out


def run(llm, prompts: list[str], tokens: int, warm: bool, temperature: float = 0.0,
        top_p: float = 1.0) -> tuple[float, int, list]:
    """Seconds, tokens generated and the outputs of one generate over `prompts` (greedy unless
    `temperature`, seeded; past eos for the one story prompt, to eos for held-out prompts)."""
    from cellspec.llm import SamplingParams

    params = SamplingParams(max_tokens=tokens, ignore_eos=prompts[0] == PROMPT, seed=0,
                            temperature=temperature, top_p=top_p)
    if not warm:
        llm.generate(prompts[:1], SamplingParams(max_tokens=2))  # warm-up
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    return time.perf_counter() - start, sum(len(o.token_ids) for o in outputs), outputs


def main() -> None:
    from cellspec.llm import LLM

    args = parse_args()
    folder = args.artifact or random_draft_artifact()
    texts = held_out_prompts(args.prompts) if args.prompts else None
    what = (f"{args.prompts} held-out prompts, at most {args.tokens} tokens each" if texts else
            f"{args.tokens} tokens per request")
    if args.temperature:
        what += f", temperature {args.temperature}, top_p {args.top_p}"
    print(f"{folder}: {what}, {args.threads} threads, max_spec_batch "
          f"{args.max_spec_batch or 'as LLM sets it'}, {args.repeats} run(s) of each")
    n_drafts = [int(n) for n in args.n_draft.split(",")] if args.n_draft else [None]
    thresholds = ([float(t) for t in args.draft_thresholds.split(",")]
                  if args.draft_thresholds else [None])
    lookups = ([int(t) for t in args.lookup_tokens.split(",")] if args.lookup_tokens
               else [None])
    matches = [int(t) for t in args.lookup_match.split(",")] if args.lookup_match else [None]
    print(f"{'batch':>5} {'n_draft':>7} {'thresh':>6} {'lookup':>9} {'plain tok/s':>12} "
          f"{'spec tok/s':>11} "
          f"{'speedup':>8} {'range':>11} {'tau':>5} {'prop/cycle':>10} "
          f"{'acc/cycle':>9} {'cycle/step':>10} {'same text':>9}")
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = texts or [PROMPT] * batch
        plain = LLM(args.plain_artifact or folder, max_sessions=batch, threads=args.threads,
                    speculation=False)
        configs = [(n_draft, threshold, lookup, match)
                   for n_draft in n_drafts for threshold in thresholds for lookup in lookups
                   for match in (matches if lookup != 0 else [None])]
        specs = [LLM(folder, max_sessions=batch, threads=args.threads, speculation=True,
                     n_draft=n_draft, max_spec_batch=args.max_spec_batch,
                     draft_threshold=threshold, lookup_tokens=lookup)
                 for n_draft, threshold, lookup, _ in configs]
        for spec, (*_, match) in zip(specs, configs):
            if match is not None:  # checked by the tool's caller, not the executor
                spec.executor.lookup_match = match
        plain_rates, spec_rates, same = [], [[] for _ in specs], [True] * len(specs)
        for repeat in range(args.repeats):  # plain, then each speculative LLM, in turn
            sampling = dict(temperature=args.temperature, top_p=args.top_p)
            seconds, count, expected = run(plain, prompts, args.tokens, repeat > 0, **sampling)
            plain_rates.append(count / seconds)
            for i, spec in enumerate(specs):
                spec_seconds, spec_count, outputs = run(spec, prompts, args.tokens, repeat > 0,
                                                        **sampling)
                spec_rates[i].append(spec_count / spec_seconds)
                same[i] &= [o.token_ids for o in outputs] == [o.token_ids for o in expected]
        # the decode step: the method the plain runs called most
        decode = max(plain.executor.target.stats.values(), key=lambda s: s.calls)
        step_seconds = decode.seconds / decode.calls
        for i, spec in enumerate(specs):
            stats = spec.executor.stats
            cycle = stats.seconds.get("round", 0.0) / max(stats.rounds, 1)  # a cycle per owner
            ratios = [s / p for s, p in zip(spec_rates[i], plain_rates)]
            threshold = spec.executor.draft_threshold
            print(f"{batch:>5} {spec.executor.n_draft:>7} {threshold or '-':>6} "
                  f"{f'{spec.executor.lookup_tokens}/{spec.executor.lookup_match}':>9} "
                  f"{median(plain_rates):>12.1f} "
                  f"{median(spec_rates[i]):>11.1f} {median(ratios):>8.2f} "
                  f"{f'{min(ratios):.2f}-{max(ratios):.2f}':>11} {stats.tau:>5.2f} "
                  f"{stats.proposed / max(stats.cycles, 1):>10.2f} "
                  f"{stats.accepted / max(stats.cycles, 1):>9.2f} {cycle / step_seconds:>10.2f} "
                  f"{str(same[i]):>9}")
            if stats.looked_up:
                print(f"      looked up {stats.looked_up / max(stats.cycles, 1):.2f} tokens a "
                      f"cycle, {stats.looked_up_accepted / max(stats.cycles, 1):.2f} accepted")
            print_breakdown(spec, step_seconds)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def print_breakdown(spec, step_seconds: float) -> None:
    """Milliseconds per round (one cycle of every owner) for each method, and per plain step."""
    rounds = max(spec.executor.stats.rounds, 1)
    methods = {**spec.executor.draft.stats, **spec.executor.target.stats}
    parts = ", ".join(f"{name} {1e3 * s.seconds / rounds:.1f}" for name, s in methods.items())
    print(f"      ms per round: {parts}; plain step {1e3 * step_seconds:.1f}")


if __name__ == "__main__":
    main()
