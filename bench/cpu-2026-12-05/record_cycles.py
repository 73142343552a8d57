"""Per held-out prompt: the prompt's ids, the greedy text, and each cycle's draft choices (a chain
of 15, no threshold), for lookup_offline.py.

    python bench/cpu-2026-12-05/record_cycles.py ARTIFACT PROMPTS OUT.pkl TOKENS
"""
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools import draft_trees as dt  # noqa: E402
from tools.dflash_train.prompts import held_out_prompts  # noqa: E402

art, nprompts, out, tokens = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
llm = LLM(art, max_sessions=1, threads=2, speculation=True, n_draft=15, draft_threshold=0)
cycles = dt.record_cycles(llm, art, 4)
res, t = [], time.time()
for prompt in held_out_prompts(nprompts):
    start = len(cycles)
    o = llm.generate([prompt.text], SamplingParams(max_tokens=tokens, seed=5, temperature=0.0))[0]
    pids = o.prompt_token_ids
    gen = list(o.token_ids)
    res.append(dict(category=prompt.category, prompt=list(pids), gen=gen,
                    cycles=[(c[0], c[1], len(c[2])) for c in cycles[start:]]))
pickle.dump(res, open(out, "wb"))
print(len(res), "prompts", sum(len(r["cycles"]) for r in res), "cycles", time.time() - t, "s")
