"""One process of the attention-mode comparison (2026-12-06, fourth sitting): should `ort-cuda`
run CellAttention by default? Run with CELLSPEC_CUDA_ATTENTION set to the mode under test.

    python3 bench/gpu-2026-12-06d/modes.py ARTIFACT LABEL [BACKEND] >> OUT.jsonl

ARTIFACT: the bundled SmolLM2 exported in float16 with the shipped draft and max_context 2048.
Prints one JSON line per measurement:
- "ttft": the time to a prompt's first token (`generate(..., max_tokens=1)`, plain LLM, chat
  off), by prompt length (tokens), the median of 5 after one warm-up of that length;
- "decode": plain and speculative (the LLM's defaults for the mode) tokens/s over 16 held-out
  prompts at 256-token greedy answers, one at a time (batch 1) and all 16 at once;
- the host probe beside each.
"""

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))

from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools.gpu_bench import held_out_prompts, host_probe_ms  # noqa: E402

folder, label = Path(sys.argv[1]), sys.argv[2]
backend = sys.argv[3] if len(sys.argv) > 3 else "ort-cuda"  # ort-cpu: a dry run
mode = os.environ.get("CELLSPEC_CUDA_ATTENTION", "(unset)")


def emit(**row) -> None:
    print(json.dumps({"label": label, "mode": mode, **row}), flush=True)


plain = LLM(folder, backend=backend, max_sessions=2, speculation=False, chat=False)
texts = held_out_prompts(64)
corpus = " ".join(texts * 8)
ids = plain.tokenizer.encode(corpus, False)
one = SamplingParams(max_tokens=1, temperature=0.0, seed=1)
for length in (32, 256, 1024, 1900):
    prompt = plain.tokenizer.decode(ids[:length])
    plain.generate([prompt], one)  # warm-up: this length's shapes captured
    times = []
    for _ in range(5):
        start = time.perf_counter()
        plain.generate([prompt], one)
        times.append(time.perf_counter() - start)
    emit(kind="ttft", tokens=length, ms=1e3 * statistics.median(times),
         best_ms=1e3 * min(times), probe_ms=host_probe_ms())

answers = SamplingParams(max_tokens=256, temperature=0.0, seed=11)
prompts = held_out_prompts(16)
del plain
for speculation in (False, True):
    llm = LLM(folder, backend=backend, max_sessions=16, speculation=speculation)
    llm.generate(prompts[:2], SamplingParams(max_tokens=32, temperature=0.0, seed=11))
    for batch in (1, 16):
        probe = host_probe_ms()
        start, tokens, texts_out = time.perf_counter(), 0, []
        groups = [[p] for p in prompts] if batch == 1 else [prompts]
        for group in groups:
            for out in llm.generate(group, answers):
                tokens += len(out.token_ids)
                texts_out.append(out.token_ids)
        seconds = time.perf_counter() - start
        emit(kind="decode", speculation=speculation, batch=batch, tokens=tokens,
             tokens_per_s=tokens / seconds, probe_ms=probe,
             tau=getattr(getattr(llm.executor, "stats", None), "tau", None),
             answers_hash=hash(tuple(tuple(t) for t in texts_out)))
    del llm
