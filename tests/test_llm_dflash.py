"""The high-level API over a DFlash artifact: speculation on or off gives the same outputs."""

import json

import pytest

from cellspec.errors import InvalidArgument
from cellspec.llm import LLM, SamplingParams
from cellspec.runtime.dflash import DFlashExecutor
from tests.reference.zlab_draft import write_random_draft
from tests.tiny_chat import save_checkpoint, tiny_chat_artifact

PROMPTS = ["hello there", "the cat sat on the mat and", "one two three", "a"]


@pytest.fixture(scope="module")
def chat_dflash_artifact(tmp_path_factory):
    from cellspec.export import ExportConfig, export

    root = tmp_path_factory.mktemp("chat-dflash")
    checkpoint = save_checkpoint(root / "checkpoint")
    vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    draft = write_random_draft(root / "draft", hidden=64, vocab=vocab, num_target_layers=2,
                               taps=[1, 0], block_size=4, mask_token_id=vocab - 1)
    out = root / "artifact"
    export(checkpoint, out, ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=32,
                                         max_context=256, max_cells=1024),
           progress=False, draft=draft)
    return out


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=24, ignore_eos=True),
    SamplingParams(temperature=0.8, top_p=0.9, max_tokens=24, seed=5, ignore_eos=True),
    SamplingParams(temperature=1.0, top_k=20, max_tokens=17, seed=9),
], ids=["greedy", "top_p", "top_k_eos"])
def test_speculation_does_not_change_the_text(chat_dflash_artifact, params):
    spec = LLM(chat_dflash_artifact, max_sessions=3)
    plain = LLM(chat_dflash_artifact, max_sessions=3, speculation=False)
    assert isinstance(spec.executor, DFlashExecutor)
    assert not isinstance(plain.executor, DFlashExecutor)
    with_spec = spec.generate(PROMPTS, params)
    without = plain.generate(PROMPTS, params)
    assert [o.token_ids for o in with_spec] == [o.token_ids for o in without]
    assert [o.text for o in with_spec] == [o.text for o in without]
    assert [o.finish_reason for o in with_spec] == [o.finish_reason for o in without]
    assert spec.executor.stats.cycles > 0
    assert "".join(spec.stream(PROMPTS[1], params)) == with_spec[1].text
    assert spec.executor.cache.num_used == 0 and spec.executor.draft.cache.num_used == 0


def test_speculation_switches_are_validated(chat_dflash_artifact, tmp_path_factory):
    with pytest.raises(InvalidArgument, match="n_draft"):
        LLM(chat_dflash_artifact, n_draft=4)
    with pytest.raises(InvalidArgument, match="speculation is off"):
        LLM(chat_dflash_artifact, speculation=False, n_draft=2)
    with pytest.raises(InvalidArgument, match="speculation"):
        LLM(chat_dflash_artifact, speculation="yes")
    with pytest.raises(InvalidArgument, match="has no draft"):
        LLM(tiny_chat_artifact(tmp_path_factory), speculation=True)
