"""Plain decoding at batch 1: wall time per token against the time inside
InferenceSession.run (256 tokens), then a cProfile of the same.

    python bench/cpu-2026-12-08a/host_share.py ARTIFACT
"""
import cProfile
import pstats
import sys
import time

import onnxruntime as ort

from cellspec import LLM, SamplingParams

TOKENS = 256
PROMPT = "The history of the city of Paris begins"

llm = LLM(sys.argv[1], speculation=False, chat=False)
params = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True)
llm.generate([PROMPT], params)  # warm-up

inner = ort.InferenceSession.run
spent = [0.0, 0]


def timed_run(self, *args, **kwargs):
    start = time.perf_counter()
    result = inner(self, *args, **kwargs)
    spent[0] += time.perf_counter() - start
    spent[1] += 1
    return result


ort.InferenceSession.run = timed_run
start = time.perf_counter()
llm.generate([PROMPT], params)
wall = time.perf_counter() - start
print(f"wall {wall * 1e3:.0f} ms for {TOKENS} tokens: {wall / TOKENS * 1e3:.2f} ms/token; "
      f"session.run {spent[0] / TOKENS * 1e3:.2f} ms/token in {spent[1]} calls")
profile = cProfile.Profile()
profile.enable()
llm.generate([PROMPT], params)
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(18)
