"""SmolLM2 with a random-weight DFlash draft: speculation gives exactly plain decoding's text,
greedy and sampled, alone and batched, through a clone and a rewind."""

import pytest
from tokenizers import Tokenizer

from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling
from tests.runtime.test_dflash_oracle import spec_decode

pytestmark = pytest.mark.slow

PROMPTS = [
    "<|im_start|>user\nName three rivers.<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time",
    "import numpy as np\n",
    "The weather today is",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4,",
]
STEPS = 12


def plain_decode(executor, prompt_ids, sampling, seeds, steps):
    """Plain decoding through the target executor alone (sessions unknown to the DFlash side)."""
    sids = [executor.open_session() for _ in prompt_ids]
    for sid, seed in zip(sids, seeds):
        executor.set_sampling(sid, sampling, seed)
    outs = executor.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, prompt_ids)])
    produced = {o.sid: [o.token] for o in outs}
    for _ in range(steps - 1):
        for out in executor.execute([BatchInput(s, (produced[s][-1],), executor.pos(s))
                                     for s in sids]):
            produced[out.sid].append(out.token)
    for sid in sids:
        executor.close_session(sid)
    return [produced[s] for s in sids]


@pytest.mark.parametrize("sampling, count", [
    (Sampling(), 6), (Sampling(temperature=0.7, top_p=0.9), 6),
    (Sampling(temperature=0.7, top_p=0.9), 1),
], ids=["greedy-6", "sampled-6", "sampled-1"])
def test_speculation_equals_plain(smollm2_dflash_artifact, sampling, count):
    tokenizer = Tokenizer.from_file(str(smollm2_dflash_artifact / "tokenizer.json"))
    ids = [tokenizer.encode(p, add_special_tokens=False).ids for p in PROMPTS[:count]]
    spec = DFlashExecutor.load(smollm2_dflash_artifact, max_sessions=12)
    seeds = list(range(3, 3 + count))
    plain = plain_decode(Executor.load(smollm2_dflash_artifact, max_sessions=12), ids, sampling,
                         seeds, STEPS + 4)
    sids = [spec.open_session() for _ in ids]
    for sid, seed in zip(sids, seeds):
        spec.set_sampling(sid, sampling, seed)
    assert spec_decode(spec, sids, ids, STEPS) == [p[:STEPS] for p in plain]
    assert spec.stats.cycles >= STEPS - 1
    if count == 1:  # clone from the middle, and rewind the original: both still match
        upto = len(ids[0]) + 4
        branch = spec.clone(sids[0], upto)
        tokens = [plain[0][4]]
        while len(tokens) < 8:
            out = spec.execute([BatchInput(branch, (tokens[-1],), spec.pos(branch))])[0]
            tokens.extend(out.tokens)
        assert tokens[:8] == plain[0][4:12]
        spec.rewind(sids[0], len(ids[0]) + 2)
        again = [plain[0][2]]
        while len(again) < 8:
            out = spec.execute([BatchInput(sids[0], (again[-1],), spec.pos(sids[0]))])[0]
            again.extend(out.tokens)
        assert again[:8] == plain[0][2:10]
        spec.close_session(branch)
    for sid in sids:
        spec.close_session(sid)
    assert spec.cache.num_used == 0 and spec.draft.cache.num_used == 0
