"""DFlash with a real (random-weight) draft on a tiny random Qwen3 target: speculation on or off
gives the same text, greedy and sampled, alone and batched, through clone and rewind."""

import pytest

from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export import export
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.types import BatchInput, Sampling
from tests.conftest import make_tiny_model
from tests.reference.zlab_draft import write_random_draft

from .test_dflash_oracle import spec_decode
from .test_executor import prompts, run_alone

SAMPLINGS = {"greedy": Sampling(), "sampled": Sampling(temperature=0.7, top_p=0.9)}


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
@pytest.mark.parametrize("count", [1, 6])
def test_speculation_equals_plain_decoding(dflash_artifact, name, count):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=8)
    sampling = SAMPLINGS[name]
    texts = prompts(count, seed=31)
    plain = [run_alone(spec.executor, p, sampling, seed=70 + i, steps=24)
             for i, p in enumerate(texts)]
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed=70 + i)
    assert spec_decode(spec, sids, texts, 20) == [p[:20] for p in plain]
    assert spec.stats.cycles > 0 and spec.stats.proposed == spec.stats.cycles * 4
    assert spec.draft.stats["draft_context"].calls > 0
    for sid in sids:
        spec.close_session(sid)
    assert spec.executor.cache.num_used == 0 and spec.draft.cache.num_used == 0
    spec.draft.cache.check()


def test_clone_and_rewind_keep_both_caches_in_step(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, n_draft=3)
    sampling = SAMPLINGS["sampled"]
    prompt = prompts(1, seed=4)[0]
    plain = run_alone(spec.executor, prompt, sampling, seed=8, steps=40)
    sid = spec.open_session()
    spec.set_sampling(sid, sampling, seed=8)
    assert spec_decode(spec, [sid], [prompt], 12)[0] == plain[:12]
    upto = len(prompt) + 5
    branch = spec.clone(sid, upto)
    assert spec.draft.cache.pos(branch) + len(spec.states[branch].hidden) == upto
    tokens = [plain[5]]
    while len(tokens) < 16:
        out = spec.execute([BatchInput(branch, (tokens[-1],), spec.pos(branch))])[0]
        tokens.extend(out.tokens)
    assert tokens[:16] == plain[5:21]
    spec.rewind(sid, len(prompt) + 2)
    assert spec.draft.cache.pos(sid) + len(spec.states[sid].hidden) == len(prompt) + 2
    again = [plain[2]]
    while len(again) < 12:
        out = spec.execute([BatchInput(sid, (again[-1],), spec.pos(sid))])[0]
        again.extend(out.tokens)
    assert again[:12] == plain[2:14]
    spec.draft.cache.check()
    spec.executor.cache.check()


def test_bad_n_draft_and_target_only_artifact(dflash_artifact, tiny_artifact):
    for bad in (1, 5, -1):
        with pytest.raises(InvalidArgument, match="n_draft"):
            DFlashExecutor.load(dflash_artifact, n_draft=bad)
    with pytest.raises(InvalidArgument, match="no draft"):
        DFlashExecutor.load(tiny_artifact)


@pytest.mark.parametrize("change, field", [
    (dict(hidden=32), "hidden_size"),
    (dict(vocab=300), "vocab_size"),
    (dict(taps=[0, 5]), "target_layer_ids"),
    (dict(mask_token_id=256), "mask_token_id"),
    (dict(block_size=2), "block_size"),
])
def test_mismatched_draft_is_refused(tmp_path, change, field):
    make_tiny_model("qwen3_gqa").save_pretrained(tmp_path / "target")
    kwargs = dict(hidden=64, vocab=256, num_target_layers=2, taps=[0, 1]) | change
    draft = write_random_draft(tmp_path / "draft", **kwargs)
    with pytest.raises(InvalidCheckpoint, match=field):
        export(tmp_path / "target", tmp_path / "out", progress=False, draft=draft)
    assert not (tmp_path / "out").exists()


def dflash_snapshot(spec):
    states = {sid: (s.pending, [row.tobytes() for row in s.hidden])
              for sid, s in spec.states.items()}
    sessions = {sid: (s.sampling, s.seed, s.is_poisoned)
                for sid, s in spec.executor.sessions.states.items()}
    return spec.executor.cache.snapshot(), spec.draft.cache.snapshot(), states, sessions


def test_rejected_batch_leaves_both_caches_unchanged(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=3, max_session_tokens=40)
    a, b = spec.open_session(), spec.open_session()
    spec.set_sampling(a, SAMPLINGS["sampled"], seed=1)
    spec_decode(spec, [a], [[5, 6, 7]], 6)  # a has a pending token and drained rows
    pending = spec.states[a].pending
    before = dflash_snapshot(spec)
    bad = [
        [BatchInput(a, (pending,), spec.pos(a)), BatchInput(b, (1,), 0)],  # b has no sampling
        [BatchInput(a, (pending,), spec.pos(a) + 1)],  # past the frontier
        [BatchInput(a, (pending,), spec.pos(a)), BatchInput(a, (1,), 0)],  # twice
        [BatchInput(a, (256,), spec.pos(a))],  # outside the vocabulary
        [BatchInput(a, (1,) * 41, 0)],  # past the budget
        [BatchInput(9, (1,), 0)],  # unknown session
    ]
    for batch in bad:
        with pytest.raises(InvalidArgument):
            spec.execute(batch)
        assert dflash_snapshot(spec) == before
    spec.executor.cache.check()
    spec.draft.cache.check()


def test_engine_failure_mid_cycle_poisons(dflash_artifact, monkeypatch):
    from cellspec.errors import ExecutionFailed

    spec = DFlashExecutor.load(dflash_artifact, max_sessions=2)
    a = spec.open_session()
    spec.set_sampling(a, SAMPLINGS["greedy"])
    spec_decode(spec, [a], [[5, 6, 7]], 3)

    def broken(feeds, names):
        raise ExecutionFailed("draft_block.onnx: ONNX Runtime run failed: injected")

    monkeypatch.setattr(spec.draft.block, "run", broken)
    with pytest.raises(ExecutionFailed, match="poisoned") as error:
        spec.execute([BatchInput(a, (spec.states[a].pending,), spec.pos(a))])
    assert error.value.poisoned == (a,)
    with pytest.raises(InvalidArgument, match="poisoned"):
        spec.execute([BatchInput(a, (1,), 0)])
    spec.close_session(a)
    assert spec.executor.cache.num_used == 0 and spec.draft.cache.num_used == 0
