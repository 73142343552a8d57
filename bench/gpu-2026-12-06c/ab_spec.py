"""One arm of an A/B of speculative decoding's rate between two checkouts of cellspec on one GPU:
run with the arm's checkout as the working directory (its cellspec and tools are imported from
there). Loads `LLM(ARTIFACT, backend="ort-cuda")` with speculation (the defaults), warms it,
then generates BLOCKS blocks of PER held-out prompts one at a time (256-token greedy answers),
each block after a host probe; prints one JSON line per block: tokens, seconds, tokens/s, the
probe (ms), the rounds and the executor's round seconds.

    (cd ARM && python3 ROOT/bench/gpu-2026-12-06c/ab_spec.py ARTIFACT LABEL BLOCKS PER)
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools.gpu_bench import held_out_prompts, host_probe_ms  # noqa: E402

folder, label, blocks, per = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
backend = sys.argv[5] if len(sys.argv) > 5 else "ort-cuda"  # ort-cpu: a dry run
llm = LLM(folder, backend=backend, max_sessions=8, speculation=True)
prompts = held_out_prompts(blocks * per)
params = SamplingParams(max_tokens=256, temperature=0.0, seed=11)
llm.generate(prompts[:1], SamplingParams(max_tokens=32, temperature=0.0, seed=11))
stats = llm.executor.stats
for block in range(blocks):
    probe = host_probe_ms()
    rounds, round_s = stats.rounds, stats.seconds.get("round", 0.0)
    tokens, start = 0, time.perf_counter()
    for prompt in prompts[block * per: (block + 1) * per]:
        tokens += len(llm.generate([prompt], params)[0].token_ids)
    seconds = time.perf_counter() - start
    print(json.dumps({"arm": label, "block": block, "tokens": tokens, "seconds": seconds,
                      "tokens_per_s": tokens / seconds, "probe_ms": probe,
                      "rounds": stats.rounds - rounds,
                      "round_ms": 1e3 * (stats.seconds.get("round", 0.0) - round_s)
                      / max(1, stats.rounds - rounds)}), flush=True)
