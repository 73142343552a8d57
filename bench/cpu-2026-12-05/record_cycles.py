"""Per held-out prompt: the prompt's ids, the greedy text, and each cycle's draft choices (a chain
of 15, no threshold), for lookup_offline.py.

    python bench/cpu-2026-12-05/record_cycles.py ARTIFACT PROMPTS OUT.pkl TOKENS
"""
import sys, pickle, time, itertools
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import numpy as np
from tools import draft_trees as dt
from cellspec import artifact as names
from cellspec.llm import LLM, SamplingParams
from tools.dflash_train.prompts import held_out_prompts
art, nprompts, out, tokens = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
llm = LLM(art, max_sessions=1, threads=2, speculation=True, n_draft=15, draft_threshold=0)
executor, draft = llm.executor, llm.executor.draft
ids = dt.proposal_ids(art)
cycles, last = [], {}
run = draft._run
def keep_logits(engine, method, count, feeds, outputs, *rest, **options):
    o = run(engine, method, count, feeds, outputs, *rest, **options)
    last["logits"] = o.get(names.LOGITS); return o
class Recorder:
    def propose(self, requests, n_draft):
        proposals, _ = draft._propose_chunk(requests, n_draft, confidence=True)
        logits = np.asarray(last["logits"][: n_draft], dtype=np.float64)
        p = np.exp(logits - logits.max(axis=1, keepdims=True)); p /= p.sum(axis=1, keepdims=True)
        top = np.argsort(-p, axis=1, kind="stable")[:, :4]
        cycles.append([top if ids is None else ids[top], np.take_along_axis(p, top, 1)])
        return proposals
draft._run = keep_logits
executor.proposer = Recorder()
speculate = executor.speculate
def keep_burst(items):
    b = speculate(items); cycles[-1].append(list(b[0])); return b
executor.speculate = keep_burst
res = []; t = time.time()
for prompt in held_out_prompts(nprompts):
    start = len(cycles)
    o = llm.generate([prompt.text], SamplingParams(max_tokens=tokens, seed=5, temperature=0.0))[0]
    pids = o.prompt_token_ids
    gen = list(o.token_ids)
    res.append(dict(category=prompt.category, prompt=list(pids), gen=gen,
                    cycles=[(c[0], c[1], len(c[2])) for c in cycles[start:]]))
pickle.dump(res, open(out, "wb"))
print(len(res), "prompts", sum(len(r["cycles"]) for r in res), "cycles", time.time() - t, "s")
