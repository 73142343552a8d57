# Plain decoding at batch 1, greedy against temperature 0.7 / top-p 0.9 (seeded), 256 tokens, alternated 4 times.
# python bench/cpu-2026-12-08a/greedy_vs_sampled.py ARTIFACT
import time, sys
from cellspec import LLM, SamplingParams
llm = LLM(sys.argv[1], speculation=False, chat=False)
g = SamplingParams(max_tokens=256, temperature=0.0, ignore_eos=True)
s = SamplingParams(max_tokens=256, temperature=0.7, top_p=0.9, seed=1, ignore_eos=True)
prompt = "The history of the city of Paris begins"
llm.generate([prompt], g)
res = {"greedy": [], "sampled": []}
for r in range(4):
    for name, sp in (("greedy", g), ("sampled", s)):
        t = time.perf_counter(); llm.generate([prompt], sp); res[name].append((time.perf_counter() - t) / 256 * 1e3)
for k, v in res.items(): print(k, " ".join(f"{x:.2f}" for x in v), "ms/token, best", f"{min(v):.2f}")
