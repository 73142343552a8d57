"""The DFlash draft shipped for the bundled SmolLM2 (cellspec/drafts/): exported with the target
through `export(..., draft=)`, it proposes tokens the target accepts, and generation with it
equals generation without it, token for token, greedy and seeded, at batch 1 and batch 8."""

import pytest

from cellspec.drafts import bundled_draft
from cellspec.export import ExportConfig, export
from cellspec.llm import LLM, SamplingParams

pytestmark = pytest.mark.slow

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "What is 17 times 23? Explain each step.",
    "List five fruits and one fact about each.",
    "Write a Python function that reverses a string.",
    "Explain why the sky is blue.",
    "Write a haiku about autumn.",
    "How do I make a cup of tea?",
    "Compare cats and dogs as pets.",
]


@pytest.fixture(scope="module")
def shipped_artifact(smollm2_gguf, tmp_path_factory):
    draft = bundled_draft()
    assert draft is not None, "cellspec/drafts/ ships no draft for the bundled model"
    out = tmp_path_factory.mktemp("shipped-draft") / "artifact"
    export(smollm2_gguf, out, ExportConfig(max_context=1024, max_cells=4096), progress=False,
           draft=draft)
    return out


@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=24),
    SamplingParams(max_tokens=24, temperature=0.7, top_p=0.9, seed=5),
], ids=["greedy", "seeded"])
def test_shipped_draft_changes_no_token(shipped_artifact, batch, params):
    prompts = PROMPTS[:batch]
    plain = LLM(shipped_artifact, max_sessions=8, speculation=False).generate(prompts, params)
    # every session speculates, also at batch 8 (LLM caps it at 4 on ort-cpu by default)
    spec = LLM(shipped_artifact, max_sessions=8, speculation=True, max_spec_batch=8)
    outputs = spec.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in plain]
    assert all(len(o.token_ids) > 0 for o in outputs)
    assert spec.executor.stats.plain_over_limit == 0
    if params.temperature == 0:  # a trained draft: a random one commits 1.0 token per cycle
        assert spec.executor.stats.tau > 1.4


@pytest.fixture(scope="module")
def shipped_int4_artifact(smollm2_gguf, tmp_path_factory):
    out = tmp_path_factory.mktemp("shipped-draft-int4") / "artifact"
    export(smollm2_gguf, out, ExportConfig(quantize="int4", max_context=1024, max_cells=4096),
           progress=False, draft=bundled_draft())
    return out


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=64),
    SamplingParams(max_tokens=64, temperature=0.7, top_p=0.9, seed=5),
], ids=["greedy", "seeded"])
def test_int4_speculation_changes_no_token(shipped_int4_artifact, params):
    """4-bit weights at accuracy level 4 (int8 activations) too: with the target's attention by
    position on ort-cpu a verify rounds as the plain steps do (as exported, 10 of 16 held-out
    prompts' 96-token texts differed)."""
    plain = LLM(shipped_int4_artifact, max_sessions=8, speculation=False).generate(PROMPTS,
                                                                                  params)
    spec = LLM(shipped_int4_artifact, max_sessions=8, speculation=True, max_spec_batch=8)
    outputs = spec.generate(PROMPTS, params)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in plain]
    assert spec.executor.stats.plain_over_limit == 0 and spec.executor.stats.cycles > 0
