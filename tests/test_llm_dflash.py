"""The high-level API over a DFlash artifact: speculation on or off gives the same outputs."""

import dataclasses
import json

import numpy as np
import pytest

from cellspec.artifact import TOP_K
from cellspec.errors import InvalidArgument
from cellspec.llm import LLM, SamplingParams
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
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
    with pytest.raises(InvalidArgument, match="max_spec_batch is set, but speculation is off"):
        LLM(chat_dflash_artifact, speculation=False, max_spec_batch=2)
    with pytest.raises(InvalidArgument, match="max_spec_batch 0"):
        LLM(chat_dflash_artifact, max_spec_batch=0)
    with pytest.raises(InvalidArgument, match="draft_threshold is set, but speculation is off"):
        LLM(chat_dflash_artifact, speculation=False, draft_threshold=0.5)
    for bad in (1.0, -0.5, float("nan"), "0.5"):
        with pytest.raises(InvalidArgument, match="draft_threshold"):
            LLM(chat_dflash_artifact, draft_threshold=bad)
    cut = LLM(chat_dflash_artifact, max_sessions=1, draft_threshold=0.25)
    assert cut.executor.draft_threshold == 0.25
    assert LLM(chat_dflash_artifact, max_sessions=1, draft_threshold=0).executor.draft_threshold \
        is None
    with pytest.raises(InvalidArgument, match="speculation"):
        LLM(chat_dflash_artifact, speculation="yes")
    with pytest.raises(InvalidArgument, match="has no draft"):
        LLM(tiny_chat_artifact(tmp_path_factory), speculation=True)


class Continuation:
    """Proposes a known continuation (prompt + plain output, by position): every proposal that
    plain decoding would make is accepted, so cycles emit bursts of n_draft + 1 tokens."""

    def __init__(self, tokens):
        self.tokens = tokens

    def propose(self, requests, n_draft):
        rows = [list(self.tokens[r.position + 1: r.position + 1 + n_draft]) for r in requests]
        return np.asarray([row + [0] * (n_draft - len(row)) for row in rows], dtype=np.int64)


@pytest.mark.parametrize("params", [
    *(SamplingParams(max_tokens=m, temperature=0.8, seed=3) for m in (1, 2, 5, 7, 30)),
    *(SamplingParams(max_tokens=30, seed=1, stop=(s,)) for s in (" the", "e", "at")),
], ids=lambda p: f"max{p.max_tokens}-stop{p.stop}")
def test_bursts_stop_exactly_where_plain_decoding_stops(chat_dflash_artifact, params):
    """A burst that runs past max_tokens, an eos or a stop string is cut exactly there."""
    spec = LLM(chat_dflash_artifact, max_sessions=1)
    plain = LLM(chat_dflash_artifact, max_sessions=1, speculation=False)
    for prompt in PROMPTS[:3]:
        expected = plain.generate([prompt], params)[0]
        full = plain.generate([prompt], dataclasses.replace(params, max_tokens=50, stop=(),
                                                             ignore_eos=True))[0]
        spec.executor.proposer = Continuation(full.prompt_token_ids + full.token_ids)
        got = spec.generate([prompt], params)[0]
        assert (got.token_ids, got.text, got.finish_reason) == (
            expected.token_ids, expected.text, expected.finish_reason)
    stats = spec.executor.stats
    assert stats.accepted > 0 or params.max_tokens <= 2
    assert spec.executor.cache.num_used == 0


def test_cpu_speculates_few_proposals_by_default(tmp_path_factory):
    """On ort-cpu a cycle proposes at most CPU_CUT_N_DRAFT tokens, cut by the draft threshold
    CPU_DRAFT_THRESHOLD; with the threshold off, at most CPU_N_DRAFT (3 with float weights, 2
    with int4); at most CPU_MAX_SPEC_BATCH sessions speculate at once, unless told otherwise;
    the text is the same at every n_draft."""
    from cellspec.export import ExportConfig, export
    from cellspec.llm import (
        CPU_CUT_N_DRAFT,
        CPU_DRAFT_THRESHOLD,
        CPU_MAX_SPEC_BATCH,
        CPU_MAX_VERIFY_ROWS,
        CPU_N_DRAFT,
    )

    root = tmp_path_factory.mktemp("block-8")
    checkpoint = save_checkpoint(root / "checkpoint")
    vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    draft = write_random_draft(root / "draft", hidden=64, vocab=vocab, num_target_layers=2,
                               taps=[1, 0], block_size=8, mask_token_id=vocab - 1)
    export(checkpoint, root / "artifact", ExportConfig(static_widths=(1, 2, 4, 8),
                                                       dynamic_width=32, max_context=256,
                                                       max_cells=1024),
           progress=False, draft=draft)
    params = SamplingParams(max_tokens=16, temperature=0.8, seed=2, ignore_eos=True)
    default = LLM(root / "artifact", max_sessions=1)
    assert CPU_CUT_N_DRAFT == 7 and default.executor.n_draft == 7  # the block's 8 - 1
    assert CPU_DRAFT_THRESHOLD == 0.2 and default.executor.draft_threshold == 0.2
    assert CPU_MAX_SPEC_BATCH == 4 and default.executor.max_spec_batch == 4
    assert CPU_MAX_VERIFY_ROWS == 12 and default.executor.max_verify_rows == 12
    uncut = LLM(root / "artifact", max_sessions=1, draft_threshold=0)
    assert CPU_N_DRAFT == {"none": 3, "int4": 2} and uncut.executor.n_draft == 3
    assert uncut.executor.draft_threshold is None and uncut.executor.max_verify_rows is None
    wide = LLM(root / "artifact", max_sessions=1, n_draft=7, max_spec_batch=9)
    assert wide.executor.n_draft == 7 and wide.executor.max_spec_batch == 9
    plain = LLM(root / "artifact", max_sessions=1, speculation=False)
    expected = plain.generate([PROMPTS[0]], params)[0].token_ids
    assert default.generate([PROMPTS[0]], params)[0].token_ids == expected
    assert wide.generate([PROMPTS[0]], params)[0].token_ids == expected
    assert uncut.generate([PROMPTS[0]], params)[0].token_ids == expected
    assert default.executor.stats.cycles > 0 and uncut.executor.stats.cycles > 0
    export(checkpoint, root / "int4", ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=32,
                                                   max_context=256, max_cells=1024,
                                                   quantize="int4"), progress=False, draft=draft)
    int4 = LLM(root / "int4", max_sessions=1)
    assert int4.executor.n_draft == 7 and int4.executor.max_spec_batch == 4
    assert LLM(root / "int4", max_sessions=1, draft_threshold=0).executor.n_draft == 2
    expected = LLM(root / "int4", max_sessions=1, speculation=False).generate([PROMPTS[0]], params)
    assert int4.generate([PROMPTS[0]], params)[0].token_ids == expected[0].token_ids


def test_sampled_sessions_speculate_except_on_cuda_with_cell_attention(monkeypatch):
    from cellspec.llm import speculates_sampled

    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "decomposed")
    assert speculates_sampled("ort-cpu") and speculates_sampled("ort-cuda")
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "cell")
    assert speculates_sampled("ort-cpu") and not speculates_sampled("ort-cuda")
    # with trees sampled sessions speculate when at most 3 sessions could
    assert speculates_sampled("ort-cuda", 15) == 3 and speculates_sampled("ort-cuda", 0) is False
    assert speculates_sampled("ort-cpu", 15) is True
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "decomposed")
    assert speculates_sampled("ort-cuda") and speculates_sampled("ort-cuda", 15) is True


def test_the_llm_lets_sampled_sessions_speculate_on_the_cpu(chat_dflash_artifact):
    llm = LLM(chat_dflash_artifact, max_sessions=2)
    assert llm.executor.speculate_sampled is True


def test_speculation_defaults_follow_the_backend(chat_dflash_artifact, monkeypatch):
    """What the caller leaves None is set per backend: ort-cpu few proposals and at most 4
    sessions; ort-cuda with CellAttention 7 proposals and at most 2 sessions, or with trees
    as deep as the block, at most 4 sessions and 16 verify rows; ort-cuda with standard-op
    attention the executor's own (block - 1, no limit). Given values are kept."""
    from cellspec.artifact import Manifest
    from cellspec.llm import CPU_DRAFT_THRESHOLD, CPU_N_DRAFT, speculation_defaults

    small = Manifest.load(chat_dflash_artifact)  # a block of 4: at most 3 proposals
    assert small.draft.block_size == 4
    manifest = dataclasses.replace(small, draft=dataclasses.replace(small.draft, block_size=16))
    assert speculation_defaults("ort-cpu", manifest, None, None) == (7, 4, CPU_DRAFT_THRESHOLD,
                                                                     12)
    assert speculation_defaults("ort-cpu", small, None, None) == (3, 4, CPU_DRAFT_THRESHOLD, 12)
    assert speculation_defaults("ort-cpu", manifest, None, None, 0.0) == (
        CPU_N_DRAFT["none"], 4, 0.0, None)  # the threshold off: few proposals, no row limit
    assert speculation_defaults("ort-cpu", manifest, 5, None, 0.5) == (5, 4, 0.5, 12)
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "cell")
    assert speculation_defaults("ort-cuda", manifest, None, None) == (7, 2, None, None)
    assert speculation_defaults("ort-cuda", small, None, None) == (3, 2, None, None)
    assert speculation_defaults("ort-cuda", manifest, 12, 8, 0.3) == (12, 8, 0.3, None)
    # a tree is as deep as the block allows
    assert speculation_defaults("ort-cuda", manifest, None, None, None, 15) == (15, 4, None,
                                                                                16)
    assert speculation_defaults("ort-cuda", small, None, None, None, 15) == (3, 4, None, 16)
    assert speculation_defaults("ort-cuda", manifest, 6, 3, None, 15) == (6, 3, None, 16)
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "decomposed")
    assert speculation_defaults("ort-cuda", manifest, None, None) == (None, None, None, None)
    assert speculation_defaults("ort-cuda", manifest, 5, None) == (5, None, None, None)


def test_a_draft_with_a_proposal_vocab_changes_no_token(tmp_path_factory):
    """A draft proposing from a third of the vocabulary only (proposal_vocab.json): its
    artifact's draft_block logits are that wide, and speculation still equals plain decoding."""
    from cellspec.artifact import Manifest
    from cellspec.export import ExportConfig, export

    root = tmp_path_factory.mktemp("chat-dflash-vocab")
    checkpoint = save_checkpoint(root / "checkpoint")
    vocab = json.loads((checkpoint / "config.json").read_text())["vocab_size"]
    draft = write_random_draft(root / "draft", hidden=64, vocab=vocab, num_target_layers=2,
                               taps=[1, 0], block_size=4, mask_token_id=vocab - 1)
    ids = sorted(np.random.default_rng(3).choice(vocab, size=vocab // 3, replace=False).tolist())
    (draft / "proposal_vocab.json").write_text(json.dumps({"token_ids": ids}))
    out = root / "artifact"
    export(checkpoint, out, ExportConfig(max_context=256, max_cells=1024), progress=False,
           draft=draft)
    assert Manifest.load(out).draft.proposal_vocab_size == len(ids)
    for params in (SamplingParams(max_tokens=20, ignore_eos=True),
                   SamplingParams(temperature=0.8, top_p=0.9, max_tokens=20, seed=5)):
        spec = LLM(out, max_sessions=3).generate(PROMPTS, params)
        plain = LLM(out, max_sessions=3, speculation=False).generate(PROMPTS, params)
        assert [o.token_ids for o in spec] == [o.token_ids for o in plain]


def test_a_manifest_whose_proposal_vocab_disagrees_with_the_draft_graph_is_refused(
        chat_dflash_artifact, tmp_path):
    import shutil

    from cellspec.errors import InvalidArtifact

    copy = tmp_path / "artifact"
    shutil.copytree(chat_dflash_artifact, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["draft"]["proposal_vocab_size"] = 7  # the graph's head covers the whole vocabulary
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InvalidArtifact, match="logits over .* draft.proposal_vocab_size says 7"):
        LLM(copy)
    assert LLM(chat_dflash_artifact).executor.draft is not None  # the original still loads


def test_tree_defaults_follow_the_backend_and_the_draft(chat_dflash_artifact, monkeypatch,
                                                        tmp_path):
    """Trees of CELL_TREE_NODES on ort-cuda with CellAttention when the draft gives its top
    choices; chains elsewhere, with a threshold, with a draft exported before trees, or asked
    (0). A given count is kept (the executor refuses it where trees cannot be exact)."""
    import shutil

    import onnx

    from cellspec.artifact import Manifest
    from cellspec.llm import CELL_TREE_NODES, tree_defaults

    folder, manifest = chat_dflash_artifact, Manifest.load(chat_dflash_artifact)
    widest = manifest.max_step_width - 1
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "cell")
    assert tree_defaults("ort-cuda", folder, manifest, None, None) == min(CELL_TREE_NODES,
                                                                          widest)
    assert tree_defaults("ort-cuda", folder, manifest, None, 0.2) is None
    assert tree_defaults("ort-cuda", folder, manifest, 0, None) is None
    assert tree_defaults("ort-cpu", folder, manifest, None, None) is None
    assert tree_defaults("ort-cpu", folder, manifest, 5, None) == 5
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "decomposed")
    assert tree_defaults("ort-cuda", folder, manifest, None, None) is None
    monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "cell")
    # a draft_block without top_ids/top_logp (exported before 2026-12-03): chains
    old = tmp_path / "old"
    shutil.copytree(folder, old)
    graph = onnx.load(str(old / manifest.draft.block_graph), load_external_data=False)
    kept = [o for o in graph.graph.output if o.name not in ("top_ids", "top_logp")]
    del graph.graph.output[:]
    graph.graph.output.extend(kept)
    onnx.save(graph, str(old / manifest.draft.block_graph))
    assert tree_defaults("ort-cuda", old, manifest, None, None) is None
    # sliding-window layers: chains (a tree step makes no window masks)
    windowed = dataclasses.replace(manifest, target_cache=tuple(
        dataclasses.replace(layer, window=16) for layer in manifest.target_cache))
    assert windowed.window == 16
    assert tree_defaults("ort-cuda", folder, windowed, None, None) is None


@pytest.mark.parametrize("option, value, message", [
    *(("tree_nodes", value, "tree_nodes") for value in (-1, True, 2.0, "7")),
    *(("tree_choices", value, f"tree_choices .*expected an int in \\[1, {TOP_K}\\]")
      for value in (0, TOP_K + 1, True, 1.0, "1")),
    *(("lookup_tokens", value, "lookup_tokens") for value in (-1, True, 2.0, "8")),
])
def test_bad_speculation_options_are_refused_before_anything_loads(option, value, message,
                                                                   monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError(f"resolved the model before checking {option}")

    monkeypatch.setattr("cellspec.llm.resolve_model", no_export)
    with pytest.raises(InvalidArgument, match=message):
        LLM("anything", **{option: value})


def test_tree_choices_need_trees_and_speculation(chat_dflash_artifact):
    with pytest.raises(InvalidArgument, match="tree_choices: chains take the first choice"):
        LLM(chat_dflash_artifact, max_sessions=2, tree_choices=1)  # ort-cpu: chains
    with pytest.raises(InvalidArgument, match="tree_choices is set, but speculation is off"):
        LLM(chat_dflash_artifact, max_sessions=2, speculation=False, tree_choices=1)


def test_trees_are_refused_where_they_cannot_be_exact(chat_dflash_artifact):
    with pytest.raises(InvalidArgument, match="backend ort-cpu cannot verify a tree"):
        LLM(chat_dflash_artifact, max_sessions=2, tree_nodes=3)
    with pytest.raises(InvalidArgument, match="tree_nodes is set, but speculation is off"):
        LLM(chat_dflash_artifact, max_sessions=2, speculation=False, tree_nodes=3)
    assert LLM(chat_dflash_artifact, max_sessions=2, tree_nodes=0).executor.tree_nodes is None


def test_lookup_defaults_follow_the_backend(chat_dflash_artifact):
    """ort-cpu looks CPU_LOOKUP_TOKENS up after each chain's proposals, ort-cuda none (not
    measured there) and trees never; a given value is kept, 0 turns it off, and it needs
    speculation."""
    from cellspec.llm import CPU_LOOKUP_TOKENS, lookup_defaults

    assert CPU_LOOKUP_TOKENS > 0
    assert lookup_defaults("ort-cpu", None, None) == CPU_LOOKUP_TOKENS
    assert lookup_defaults("ort-cpu", None, 3) == 3
    assert lookup_defaults("ort-cuda", None, None) == 0
    assert lookup_defaults("ort-cuda", 15, None) == 0
    assert lookup_defaults("ort-cuda", None, 5) == 5
    llm = LLM(chat_dflash_artifact, max_sessions=2)
    assert llm.executor.lookup_tokens == CPU_LOOKUP_TOKENS
    assert LLM(chat_dflash_artifact, max_sessions=2, lookup_tokens=0).executor.lookup_tokens == 0
    with pytest.raises(InvalidArgument, match="lookup_tokens is set, but speculation is off"):
        LLM(chat_dflash_artifact, max_sessions=2, speculation=False, lookup_tokens=4)
    assert isinstance(LLM(chat_dflash_artifact, max_sessions=2, speculation=False,
                          lookup_tokens=0).executor, Executor)
