"""Host sampler: the full stable sort (old) vs sample_token (new), ms per row, side by side.

Both run in one process on the same rows and uniforms, taking turns; the old sampler is the rule
on the full stable order (`sampling_values.draw_sorted`, the former body of sample_token). Every
row's token is checked equal. Best of --repeats timings of all rows of a case.

    python tools/bench_sampling.py [--vocabs 49152,151936] [--rows 8] [--repeats 7]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {  # name -> (temperature, top_p, top_k)
    "t0.7 p0.9": (0.7, 0.9, 0),
    "t1.0 p1.0": (1.0, 1.0, 0),
    "t0.7 k50": (0.7, 1.0, 50),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocabs", default="49152,151936")
    parser.add_argument("--rows", type=int, default=8, help="rows of logits per case")
    parser.add_argument("--repeats", type=int, default=7, help="best of N timings")
    return parser.parse_args()


def make_logits(kind: str, rows: int, vocab: int, seed: int) -> np.ndarray:
    """[rows, vocab] float32: normal logits scaled by 3 or 8, or peaked (one token ~20 above
    normal x 2 noise, as a confident language model)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((rows, vocab), dtype=np.float32)
    if kind == "peaked":
        logits = noise * np.float32(2.0)
        logits[np.arange(rows), rng.integers(vocab, size=rows)] += np.float32(20.0)
        return logits
    return noise * np.float32(float(kind.removeprefix("normal x")))


def old_token(logits: np.ndarray, temperature: float, top_p: float, top_k: int, u: float) -> int:
    from cellspec.runtime.sampling_values import draw_sorted

    scaled = logits.astype(np.float32) / np.float32(temperature)
    return draw_sorted(scaled, top_p, top_k, u)


def best_ms_per_row(samplers: list, logits: np.ndarray, setting: tuple, uniforms: list[float],
                    repeats: int) -> tuple[list[float], list[list[int]]]:
    """Each sampler over all rows, taking turns within every repeat (the machine is shared: its
    load drifts); the best time of each, in ms per row, and its tokens."""
    best, tokens = [float("inf")] * len(samplers), [[] for _ in samplers]
    for _ in range(repeats):
        for i, sampler in enumerate(samplers):
            start = time.perf_counter()
            tokens[i] = [sampler(row, *setting, u) for row, u in zip(logits, uniforms)]
            best[i] = min(best[i], time.perf_counter() - start)
    return [1e3 * b / len(logits) for b in best], tokens


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(ROOT))  # this checkout's cellspec, not an installed one
    from cellspec.runtime.sampling import positional_uniform, sample_token

    print(f"{'vocab':>6} {'logits':>9} {'setting':>9} {'old ms/row':>10} {'new ms/row':>10} "
          f"{'old/new':>7} {'same':>4}")
    for vocab in [int(v) for v in args.vocabs.split(",")]:
        for seed, kind in enumerate(("normal x3", "normal x8", "peaked")):
            logits = make_logits(kind, args.rows, vocab, seed)
            uniforms = [positional_uniform(seed, i) for i in range(args.rows)]
            for name, setting in SETTINGS.items():
                (old, new), (expected, tokens) = best_ms_per_row(
                    [old_token, sample_token], logits, setting, uniforms, args.repeats)
                print(f"{vocab:>6} {kind:>9} {name:>9} {old:>10.3f} {new:>10.3f} "
                      f"{old / new:>7.1f} {'yes' if tokens == expected else 'NO':>4}")


if __name__ == "__main__":
    main()
