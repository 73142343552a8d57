"""Soak: push a million tokens or more through `LLM.generate` on a tiny model, with random
request mixes, and check that nothing leaks.

Each round generates for a random batch of requests: random prompt lengths, max_tokens, stop
strings, seeds, temperatures, and speculation on (a random DFlash draft) or off, some requests
streamed and abandoned half way. Every round checks the cell accounting (no cell in use once
the round's sessions are closed, the caches' invariants hold); the report gives tokens/s, the
resident memory over time and the accounting at the end. Exits 1 on a leak.

With --differential F, a fraction F of the rounds also checks the product's promises on that
round's requests: the same batch through the draft's export with speculation on and off (the
same target, so the same tokens, text and finish reasons at any temperature), and one request
of the batch alone (batch invariance). (Not against the export without a draft: its target
keeps the exported attention, which rounds otherwise than the by-position form a target with a
draft runs on ort-cpu, so its text may differ at a near-tie: docs/design.md, "Determinism".)
Exits 1 on a difference too; the report lists the first ones.

    python tools/soak.py [--tokens 1000000] [--seed 0] [--differential 0.3] [--bundled]
        [--out soak.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORDS = ("the quick brown fox jumps over the lazy dog hello world what is the capital of France "
         "Paris naïve café 日本語 emoji 🙂").split()


def make_models(root: Path) -> tuple[Path, Path]:
    """A tiny chat model (tests/tiny_chat.py) exported plain and with a random DFlash draft."""
    from cellspec.export import ExportConfig, export
    from tests.reference.zlab_draft import write_random_draft
    from tests.tiny_chat import save_checkpoint

    checkpoint = save_checkpoint(root / "checkpoint")
    config = ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=32, max_context=256,
                          max_cells=4096)
    plain = root / "plain"
    export(checkpoint, plain, config, progress=False)
    vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    draft = write_random_draft(root / "draft", hidden=64, vocab=vocab, num_target_layers=2,
                               taps=[0, 1], block_size=5, mask_token_id=3)
    spec = root / "spec"
    export(checkpoint, spec, config, progress=False, draft=draft)
    return plain, spec


def random_requests(rng: np.random.Generator, count: int, max_tokens: int = 160):
    from cellspec.llm import SamplingParams

    prompts, params = [], []
    for _ in range(count):
        prompts.append(" ".join(rng.choice(WORDS, int(rng.integers(1, 40)))))
        stop = [str(rng.choice(WORDS))] if rng.random() < 0.3 else []
        hot = rng.random() < 0.6
        params.append(SamplingParams(
            temperature=float(rng.uniform(0.3, 1.5)) if hot else 0.0,
            top_p=float(rng.uniform(0.5, 1.0)), top_k=int(rng.integers(0, 50)),
            max_tokens=int(rng.integers(1, max_tokens)), stop=stop,
            seed=int(rng.integers(0, 2**32)), ignore_eos=bool(rng.random() < 0.5)))
    return prompts, params


def check_accounting(llm) -> dict:
    """Every session closed, every cell free, the caches' invariants intact."""
    executor = llm.executor
    executor.cache.check()
    draft = getattr(executor, "draft", None)
    if draft is not None:
        draft.cache.check()
    return {"sessions_open": len(executor.sessions), "cells_used": executor.cache.num_used,
            "draft_cells_used": draft.cache.num_used if draft is not None else 0}


def differences(got, expected, what: str) -> list[dict]:
    """Where two runs of the same requests disagree: tokens, text or finish reason."""
    found = []
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        for name in ("token_ids", "text", "finish_reason"):
            if getattr(a, name) != getattr(b, name):
                found.append({"check": what, "request": i, "field": name,
                              "got": str(getattr(a, name))[:200],
                              "expected": str(getattr(b, name))[:200]})
                break
    return found


def soak(args) -> dict:
    from cellspec.llm import LLM

    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        if args.bundled:  # the default model and its shipped draft, as `cellspec generate`
            llms = {False: LLM(speculation=False, max_sessions=8), True: LLM(max_sessions=8)}
            spec_off = llms[False]  # the same export (model_cache.bundled_export)
        else:
            plain, spec = make_models(Path(tmp))
            llms = {False: LLM(plain, max_sessions=8), True: LLM(spec, max_sessions=8)}
            spec_off = LLM(spec, max_sessions=8, speculation=False)
        tokens, rounds, memory, leaks = 0, 0, [], []
        checked, differing = 0, []
        start = time.perf_counter()
        while tokens < args.tokens:
            speculation = bool(rng.random() < 0.5)
            llm = llms[speculation]
            prompts, params = random_requests(rng, int(rng.integers(1, 13)),
                                              64 if args.bundled else 160)
            if rng.random() < 0.1:  # a stream abandoned half way closes its session
                stream = llm.stream(prompts[0], params[0])
                for _ in zip(range(int(rng.integers(1, 5))), stream):
                    pass
                stream.close()
            outputs = llm.generate(prompts, params)
            tokens += sum(len(o.token_ids) for o in outputs)
            rounds += 1
            if rng.random() < args.differential:
                on = outputs if speculation else llms[True].generate(prompts, params)
                found = differences(on, spec_off.generate(prompts, params),
                                    "speculation on against off")
                alone = int(rng.integers(len(prompts)))
                found += differences([outputs[alone]],
                                     llm.generate([prompts[alone]], [params[alone]]),
                                     f"request {alone} alone against in a batch of "
                                     f"{len(prompts)}")
                checked += 1
                for difference in found:
                    if len(differing) < 20:
                        differing.append({"round": rounds, **difference})
                    print(f"round {rounds}: {difference}", flush=True)
            accounting = check_accounting(llm)
            if any(accounting.values()):
                leaks.append({"round": rounds, **accounting})
            if rounds % 50 == 0:
                rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                memory.append({"tokens": tokens, "seconds": time.perf_counter() - start,
                               "max_rss_mb": rss})
                print(f"{tokens:9d} tokens, {tokens / memory[-1]['seconds']:7.0f} tok/s, "
                      f"max RSS {rss:.0f} MB", flush=True)
        seconds = time.perf_counter() - start
        return {"tokens": tokens, "rounds": rounds, "seconds": seconds,
                "tokens_per_s": tokens / seconds, "memory": memory, "leaks": leaks,
                "final": {str(k): check_accounting(v) for k, v in llms.items()},
                "differential": {"rounds_checked": checked, "differences": differing},
                "dflash": {"cycles": llms[True].executor.stats.cycles,
                           "tau": llms[True].executor.stats.tau}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--differential", type=float, default=0.0,
                        help="the fraction of rounds also run with speculation switched and "
                        "one request alone, each compared (0 to 1)")
    parser.add_argument("--bundled", action="store_true",
                        help="the bundled SmolLM2 and its shipped draft (a trained draft: "
                        "bursts of accepted tokens, which a random draft rarely makes) instead "
                        "of the tiny model and a random draft; requests of at most 63 tokens")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not 0.0 <= args.differential <= 1.0:
        parser.error(f"--differential {args.differential}: expected a fraction in [0, 1]")
    if args.tokens < 1:
        parser.error(f"--tokens {args.tokens}: expected at least 1")
    report = soak(args)
    print(json.dumps({k: v for k, v in report.items() if k != "memory"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    sys.exit(1 if report["leaks"] or report["differential"]["differences"] else 0)


if __name__ == "__main__":
    main()
