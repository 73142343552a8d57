"""Plain decoding at batch 1, greedy against temperature 0.7 / top-p 0.9 (seeded), 256 tokens,
alternated 4 times in one process.

    python bench/cpu-2026-12-08a/greedy_vs_sampled.py ARTIFACT
"""
import sys
import time

from cellspec import LLM, SamplingParams

TOKENS = 256
PROMPT = "The history of the city of Paris begins"

llm = LLM(sys.argv[1], speculation=False, chat=False)
modes = {
    "greedy": SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True),
    "sampled": SamplingParams(max_tokens=TOKENS, temperature=0.7, top_p=0.9, seed=1,
                              ignore_eos=True),
}
llm.generate([PROMPT], modes["greedy"])  # warm-up
times: dict[str, list[float]] = {name: [] for name in modes}
for _ in range(4):
    for name, params in modes.items():
        start = time.perf_counter()
        llm.generate([PROMPT], params)
        times[name].append((time.perf_counter() - start) / TOKENS * 1e3)
for name, values in times.items():
    print(name, " ".join(f"{v:.2f}" for v in values), f"ms/token, best {min(values):.2f}")
