"""How well the draft's own probabilities predict acceptance, and what a draft threshold would
pay on this machine: a model, to choose thresholds before timing them with bench_spec.py.

Runs speculative decoding (greedy, batch 1, --n-draft proposals a cycle) on held-out prompts and
records, for every cycle, the draft's probability of each proposal and how many were accepted.
Then times the target's forward at widths 1..n_draft+1 on this machine, and prints, for each
fixed n and each threshold, the modeled speed against plain decoding:

    sum over cycles (accepted within the cut + 1) / sum (verify(cut + 1) + OVERHEAD) * step

where OVERHEAD (--overhead-ms) is the rest of a cycle (draft block, drain, host). Acceptance
within a cut is exact (a cut keeps a prefix of the same proposals); only the costs are modeled.

    python tools/draft_confidence.py ARTIFACT [--prompts 16] [--tokens 96] [--n-draft 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", type=Path, help="an artifact with a DFlash draft")
    parser.add_argument("--prompts", type=int, default=16, help="held-out prompts")
    parser.add_argument("--tokens", type=int, default=96, help="most tokens per answer")
    parser.add_argument("--n-draft", type=int, default=7, help="proposals a cycle recorded")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--overhead-ms", type=float, help="a cycle's cost beyond its verify "
                        "(default: the draft block and drains as measured in the run)")
    return parser.parse_args()


class Recorder:
    """The executor's proposer: the draft's proposals, uncut, with their probabilities kept."""

    def __init__(self, draft) -> None:
        self.draft, self.probs = draft, []

    def propose(self, requests, n_draft: int) -> np.ndarray:
        proposals, probs = self.draft.propose_with_confidence(requests, n_draft)
        self.probs.append(probs)
        return proposals


def record(llm, prompts: list[str], tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities [cycles, n], accepted [cycles]) of every cycle of the run (the LLM
    speculating uncut: no draft threshold, so no verify row limit either)."""
    from cellspec.llm import SamplingParams

    executor, accepted = llm.executor, []
    assert executor.draft_threshold is None and executor.max_verify_rows is None
    recorder, count = Recorder(executor.draft), executor._count

    def counted(n_accepted, n_draft):
        accepted.append(n_accepted)
        count(n_accepted, n_draft)

    executor.proposer, executor._count = recorder, counted
    for prompt in prompts:
        llm.generate([prompt], SamplingParams(max_tokens=tokens))
    probs = np.concatenate(recorder.probs)
    assert probs.shape == (len(accepted), executor.n_draft), probs.shape
    return probs, np.asarray(accepted)


def verify_ms(executor, widths: range, rounds: int = 6) -> dict[int, float]:
    """Median ms of a target forward of w tokens after a 64-token prompt, for each w."""
    sid = executor.open_session()
    target = executor.target
    target.forward(np.full(64, sid), np.arange(100, 164, dtype=np.int64), np.array([63]))
    times: dict[int, list[float]] = {w: [] for w in widths}
    for _ in range(rounds):
        for w in widths:
            start = time.perf_counter()
            target.forward(np.full(w, sid), np.arange(200, 200 + w, dtype=np.int64),
                           np.arange(w))
            times[w].append(time.perf_counter() - start)
            executor.cache.rewind(sid, 64)
    executor.close_session(sid)
    return {w: 1e3 * float(np.median(t)) for w, t in times.items()}


def main() -> None:
    from cellspec.llm import LLM
    from cellspec.runtime.dflash import confident_length
    from tools.bench_spec import held_out_prompts

    args = parse_args()
    llm = LLM(args.artifact, max_sessions=1, threads=args.threads, speculation=True,
              n_draft=args.n_draft, draft_threshold=0)
    probs, accepted = record(llm, held_out_prompts(args.prompts), args.tokens)
    draft_ms = sum(s.seconds for s in llm.executor.draft.stats.values()) * 1e3 / len(accepted)
    overhead = draft_ms if args.overhead_ms is None else args.overhead_ms
    cost = verify_ms(llm.executor, range(1, args.n_draft + 2))
    step = cost[1]
    print(f"{len(accepted)} cycles; tau at {args.n_draft}: {(accepted + 1).mean():.2f}; "
          f"overhead {overhead:.1f} ms a cycle; verify ms by width: "
          + ", ".join(f"{w}: {ms:.1f}" for w, ms in cost.items()))
    print("row-1 acceptance by the draft's probability of it:")
    for low, high in ((0, .2), (.2, .4), (.4, .6), (.6, .8), (.8, 1.01)):
        rows = (probs[:, 0] >= low) & (probs[:, 0] < high)
        if rows.any():
            print(f"  [{low:.1f}, {min(high, 1):.1f}): {rows.sum():>4} cycles, "
                  f"{(accepted[rows] >= 1).mean():.2f} accepted")

    def modeled(cuts: np.ndarray) -> str:
        kept = np.minimum(accepted, cuts) + 1
        ms = np.array([cost[int(c) + 1] for c in cuts]) + overhead
        return (f"{kept.sum() / ms.sum() * step:.3f}x plain, tau {kept.mean():.2f}, "
                f"{cuts.mean():.2f} proposals a cycle")

    for n in range(1, args.n_draft + 1):
        print(f"fixed n {n}: {modeled(np.full(len(accepted), n))}")
    for threshold in THRESHOLDS:
        cuts = np.array([confident_length(p[None], threshold) for p in probs])
        print(f"n {args.n_draft}, threshold {threshold}: {modeled(cuts)}")


if __name__ == "__main__":
    main()
