"""The host sampler's draw_large on logits rows captured from real decoding, an older
sampling_head.py against this checkout's, alternating, best of 3; every row's token compared.

    git show <commit>:cellspec/runtime/sampling_head.py > /tmp/old_sampling_head.py
    python bench/cpu-2026-12-02e/sampler_rows_ab.py ARTIFACT /tmp/old_sampling_head.py

Rows: 8 chat prompts answered at temperature 0.7, top_p 0.9 (48 tokens each, plain decoding).
"""

import importlib.util
import sys
import time

import numpy as np

from cellspec import LLM
from cellspec.request import SamplingParams
from cellspec.runtime import sampling, sampling_head

PROMPTS = ["What is the capital of France?", "Write a short poem about the sea.",
           "List three fruits.", "Explain how a bicycle works.",
           "Write a Python function that reverses a string.", "What is 17 times 23?",
           "Tell me a story about a dragon.", "Give me tips for sleeping better."]


def capture(artifact: str) -> list[tuple[np.ndarray, int, float]]:
    rows, draw = [], sampling.draw_large

    def keep(scaled, first, count, top_p, uniform):
        rows.append((scaled.copy(), first, uniform))
        return draw(scaled, first, count, top_p, uniform)

    sampling.draw_large = keep
    try:
        LLM(artifact, speculation=False).generate(
            PROMPTS, SamplingParams(temperature=0.7, top_p=0.9, max_tokens=48, seed=1))
    finally:
        sampling.draw_large = draw
    return rows


def main() -> None:
    artifact, old_path = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("old_sampling_head", old_path)
    old = importlib.util.module_from_spec(spec)
    sys.modules["old_sampling_head"] = old
    spec.loader.exec_module(old)
    rows = capture(artifact)
    share = [np.count_nonzero(s - s[f] >= -19.5) / s.size for s, f, _ in rows]
    best, tokens = {}, {}
    for _ in range(3):
        for name, draw in (("old", old.draw_large), ("new", sampling_head.draw_large)):
            start = time.perf_counter()
            tokens[name] = [draw(s, f, s.size, 0.9, u) for s, f, u in rows]
            best[name] = min(best.get(name, np.inf), (time.perf_counter() - start) / len(rows))
    print(f"{len(rows)} rows (vocab {rows[0][0].size}), median share within 19.5 of the max "
          f"{np.median(share):.3f}: old {1e3 * best['old']:.3f} ms a row, new "
          f"{1e3 * best['new']:.3f}, x{best['old'] / best['new']:.2f}, same tokens "
          f"{tokens['old'] == tokens['new']}")


if __name__ == "__main__":
    main()
