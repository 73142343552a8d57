"""Plain vs DFlash speculative decoding on one artifact, side by side in one run.

Prints tokens/s for each, tau (tokens committed per cycle), proposals accepted per cycle, and the
cost of one cycle (drain + draft + verify + commit) over the cost of one plain decode step.

    python tools/bench_spec.py --artifact DIR [--batches 1,6] [--tokens 48] [--n-draft 15,7,3]
        [--max-spec-batch N]
    python tools/bench_spec.py --random-draft   # SmolLM2 + a random draft: tau ~ 1, pure overhead
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
    parser.add_argument("--max-spec-batch", type=int,
                        help="the most sessions speculating in one step (default: LLM's, 4 on "
                        "ort-cpu)")
    args = parser.parse_args()
    if (args.artifact is None) == (not args.random_draft):
        parser.error("pass exactly one of --artifact and --random-draft")
    return args


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


def run(llm, batch: int, tokens: int) -> tuple[float, int, list]:
    from cellspec.llm import SamplingParams

    params = SamplingParams(max_tokens=tokens, ignore_eos=True, seed=0)
    llm.generate([PROMPT] * batch, SamplingParams(max_tokens=2))  # warm-up
    start = time.perf_counter()
    outputs = llm.generate([PROMPT] * batch, params)
    return time.perf_counter() - start, sum(len(o.token_ids) for o in outputs), outputs


def main() -> None:
    from cellspec.llm import LLM

    args = parse_args()
    folder = args.artifact or random_draft_artifact()
    print(f"{folder}: {args.tokens} tokens per request, {args.threads} threads, "
          f"max_spec_batch {args.max_spec_batch or 'as LLM sets it'}")
    n_drafts = [int(n) for n in args.n_draft.split(",")] if args.n_draft else [None]
    print(f"{'batch':>5} {'n_draft':>7} {'plain tok/s':>12} {'spec tok/s':>11} {'speedup':>8} "
          f"{'tau':>5} "
          f"{'acc/cycle':>9} {'cycle/step':>10} {'same text':>9}")
    for batch in [int(b) for b in args.batches.split(",")]:
        plain = LLM(folder, max_sessions=batch, threads=args.threads, speculation=False)
        seconds, count, expected = run(plain, batch, args.tokens)
        # the decode step: the method the plain run called most
        decode = max(plain.executor.target.stats.values(), key=lambda s: s.calls)
        step_seconds = decode.seconds / decode.calls
        for n_draft in n_drafts:
            spec = LLM(folder, max_sessions=batch, threads=args.threads, speculation=True,
                       n_draft=n_draft, max_spec_batch=args.max_spec_batch)
            spec_seconds, spec_count, outputs = run(spec, batch, args.tokens)
            stats = spec.executor.stats
            cycle = stats.seconds.get("round", 0.0) / max(stats.rounds, 1)  # a cycle per owner
            same = [o.token_ids for o in outputs] == [o.token_ids for o in expected]
            print(f"{batch:>5} {spec.executor.n_draft:>7} {count / seconds:>12.1f} "
                  f"{spec_count / spec_seconds:>11.1f} "
                  f"{seconds / spec_seconds * spec_count / count:>8.2f} {stats.tau:>5.2f} "
                  f"{stats.accepted / max(stats.cycles, 1):>9.2f} {cycle / step_seconds:>10.2f} "
                  f"{str(same):>9}")
            print_breakdown(spec, step_seconds)


def print_breakdown(spec, step_seconds: float) -> None:
    """Milliseconds per round (one cycle of every owner) for each method, and per plain step."""
    rounds = max(spec.executor.stats.rounds, 1)
    methods = {**spec.executor.draft.stats, **spec.executor.target.stats}
    parts = ", ".join(f"{name} {1e3 * s.seconds / rounds:.1f}" for name, s in methods.items())
    print(f"      ms per round: {parts}; plain step {1e3 * step_seconds:.1f}")


if __name__ == "__main__":
    main()
