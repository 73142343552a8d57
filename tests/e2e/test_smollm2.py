"""SmolLM2: cellspec's greedy continuations equal transformers', token for token."""

import pytest
from tokenizers import Tokenizer

from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling

pytestmark = pytest.mark.slow

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "The three primary colours are",
    "def fibonacci(n):\n    ",
]
NEW_TOKENS = 64


def hf_greedy(model, prompt_ids, steps):
    import torch

    ids = torch.tensor([prompt_ids])
    produced = []
    with torch.no_grad():
        out = model(ids, use_cache=True)
        for _ in range(steps):
            token = int(out.logits[0, -1].argmax())
            produced.append(token)
            out = model(torch.tensor([[token]]), cache=out.cache, use_cache=True)
    return produced


def test_greedy_continuations_equal_transformers(smollm2_artifact, smollm2_hf):
    tokenizer = Tokenizer.from_file(str(smollm2_artifact / "tokenizer.json"))
    prompt_ids = [tokenizer.encode(p, add_special_tokens=False).ids for p in PROMPTS]
    executor = Executor.load(smollm2_artifact, max_sessions=len(PROMPTS))
    sids = [executor.open_session() for _ in PROMPTS]
    for sid in sids:
        executor.set_sampling(sid, Sampling())
    # all prompts in one packed step, then every session decodes in one batch per step
    outs = executor.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, prompt_ids)])
    produced = {o.sid: [o.token] for o in outs}
    for _ in range(NEW_TOKENS - 1):
        batch = [BatchInput(s, (produced[s][-1],), executor.pos(s)) for s in sids]
        for out in executor.execute(batch):
            produced[out.sid].append(out.token)
    for sid, ids in zip(sids, prompt_ids):
        expected = hf_greedy(smollm2_hf, ids, NEW_TOKENS)
        assert produced[sid] == expected, tokenizer.decode(expected)
    assert "Paris" in tokenizer.decode(produced[sids[0]])
