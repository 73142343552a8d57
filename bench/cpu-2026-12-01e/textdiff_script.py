import sys; sys.path.insert(0, "/work/main")
from cellspec.llm import LLM, SamplingParams
from tools.dflash_train.prompts import held_out_texts
prompts = held_out_texts(16)
p = SamplingParams(max_tokens=96)
a = [o.token_ids for o in LLM("/tmp/art-i4d", speculation=False).generate(prompts, p)]
b = [o.token_ids for o in LLM("/tmp/art-int4").generate(prompts, p)]
for i, (x, y) in enumerate(zip(a, b)):
    first = next((k for k, (u, v) in enumerate(zip(x, y)) if u != v), None)
    print(i, len(x), len(y), "same" if x == y else f"first difference at token {first}")
