"""Greedy texts of the int4 export with the draft (speculation off) against the int4 export
without it, 16 held-out prompts x 96 tokens (textdiff.log). Run from the repository root."""
import sys

sys.path.insert(0, ".")
from cellspec.llm import LLM, SamplingParams  # noqa: E402
from tools.dflash_train.prompts import held_out_texts  # noqa: E402

prompts = held_out_texts(16)
params = SamplingParams(max_tokens=96)
with_draft = LLM(sys.argv[1], speculation=False).generate(prompts, params)
without = LLM(sys.argv[2]).generate(prompts, params)
for i, (a, b) in enumerate(zip(with_draft, without)):
    x, y = a.token_ids, b.token_ids
    first = next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), None)
    print(i, len(x), len(y), "same" if x == y else f"first difference at token {first}")
