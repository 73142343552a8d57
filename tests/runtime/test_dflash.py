"""DFlash with a real (random-weight) draft on a tiny random Qwen3 target: speculation on or off
gives the same text, greedy and sampled, alone and batched, through clone and rewind."""

import numpy as np
import pytest

from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export import export
from cellspec.runtime.dflash import DFlashExecutor, confident_length
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling
from tests.conftest import draft_calls, make_tiny_model
from tests.reference.zlab_draft import write_random_draft

from .test_dflash_oracle import spec_decode
from .test_executor import prompts, run_alone

SAMPLINGS = {"greedy": Sampling(), "sampled": Sampling(temperature=0.7, top_p=0.9)}


def undrained(spec, sid):
    """The positions the draft covers: its cache, then taps waiting in the target's cells (so
    the draft never holds more than the target)."""
    assert spec.draft.cache.pos(sid) <= spec.pos(sid)
    return spec.pos(sid)


def plain_executor(spec):
    """A plain executor over the same artifact and limits as `spec`."""
    return Executor.load(spec.folder, max_sessions=spec.max_sessions,
                         max_session_tokens=spec.max_session_tokens)


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
@pytest.mark.parametrize("count", [1, 6])
def test_speculation_equals_plain_decoding(dflash_artifact, name, count):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=8)
    sampling = SAMPLINGS[name]
    texts = prompts(count, seed=31)
    plain = [run_alone(plain_executor(spec), p, sampling, seed=70 + i, steps=24)
             for i, p in enumerate(texts)]
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed=70 + i)
    assert spec_decode(spec, sids, texts, 20) == [p[:20] for p in plain]
    assert spec.stats.cycles > 0 and spec.stats.proposed == spec.stats.cycles * 4
    assert draft_calls(spec.draft.stats, "draft_context") > 0
    for sid in sids:
        spec.close_session(sid)
    assert spec.cache.num_used == 0 and spec.draft.cache.num_used == 0
    spec.draft.cache.check()


def test_clone_and_rewind_keep_both_caches_in_step(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, n_draft=3)
    sampling = SAMPLINGS["sampled"]
    prompt = prompts(1, seed=4)[0]
    plain = run_alone(plain_executor(spec), prompt, sampling, seed=8, steps=40)
    sid = spec.open_session()
    spec.set_sampling(sid, sampling, seed=8)
    assert spec_decode(spec, [sid], [prompt], 12)[0] == plain[:12]
    upto = len(prompt) + 5
    branch = spec.clone(sid, upto)
    assert undrained(spec, branch) == upto
    tokens = [plain[5]]
    while len(tokens) < 16:
        out = spec.execute([BatchInput(branch, (tokens[-1],), spec.pos(branch))])[0]
        tokens.extend(out.tokens)
    assert tokens[:16] == plain[5:21]
    spec.rewind(sid, len(prompt) + 2)
    assert undrained(spec, sid) == len(prompt) + 2
    again = [plain[2]]
    while len(again) < 12:
        out = spec.execute([BatchInput(sid, (again[-1],), spec.pos(sid))])[0]
        again.extend(out.tokens)
    assert again[:12] == plain[2:14]
    spec.draft.cache.check()
    spec.cache.check()


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
def test_batches_over_max_spec_batch_step_plainly(dflash_artifact, name):
    """With 3 sessions pending and max_spec_batch 2, steps are plain (no cycle, the draft cache
    left behind); once one session is done, the other two speculate, draining the taps the
    plain steps left. The text equals plain decoding's throughout."""
    sampling = SAMPLINGS[name]
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, n_draft=3, max_spec_batch=2)
    texts = prompts(3, seed=21)
    plain = [run_alone(plain_executor(spec), p, sampling, seed=90 + i, steps=30)
             for i, p in enumerate(texts)]
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed=90 + i)
    assert spec_decode(spec, sids[:1], texts[:1], 1) == [plain[0][:1]]  # prefill alone
    assert spec_decode(spec, sids[1:], texts[1:], 1) == [p[:1] for p in plain[1:]]
    produced = {sid: [p[0]] for sid, p in zip(sids, plain)}
    for _ in range(6):  # three pending sessions: plain steps, one token each
        outs = spec.execute([BatchInput(s, (produced[s][-1],), spec.pos(s)) for s in sids])
        assert [len(o.tokens) for o in outs] == [1, 1, 1]
        for out in outs:
            produced[out.sid].extend(out.tokens)
    assert spec.stats.cycles == 0 and spec.stats.plain_over_limit == 6
    # nothing drained yet: the prompts' and the six steps' taps wait in the target's pool
    assert [spec.draft.cache.pos(s) for s in sids] == [0, 0, 0]
    assert [spec.pos(s) for s in sids] == [len(t) + 6 for t in texts]
    spec.close_session(sids[0])
    while any(len(produced[s]) < 30 for s in sids[1:]):
        live = [s for s in sids[1:] if len(produced[s]) < 30]
        for out in spec.execute([BatchInput(s, (produced[s][-1],), spec.pos(s)) for s in live]):
            produced[out.sid].extend(out.tokens)
    assert spec.stats.cycles > 0 and spec.stats.plain_over_limit == 6
    assert [produced[s][:30] for s in sids[1:]] == [p[:30] for p in plain[1:]]
    assert produced[sids[0]] == plain[0][:7]
    spec.draft.cache.check()
    spec.cache.check()


def test_bad_n_draft_and_target_only_artifact(dflash_artifact, tiny_artifact):
    for bad in (1, 5, -1):
        with pytest.raises(InvalidArgument, match="n_draft"):
            DFlashExecutor.load(dflash_artifact, n_draft=bad)
    for bad in (0, -2, True, 1.5, "4", np.int64(0)):
        with pytest.raises(InvalidArgument, match="max_spec_batch"):
            DFlashExecutor.load(dflash_artifact, max_spec_batch=bad)
    limited = DFlashExecutor.load(dflash_artifact, max_spec_batch=np.int64(3))  # numpy ints too
    assert limited.max_spec_batch == 3 and type(limited.max_spec_batch) is int
    with pytest.raises(InvalidArgument, match="no draft"):
        DFlashExecutor.load(tiny_artifact)


def test_confident_length_is_the_longest_confident_prefix_of_any_owner():
    probs = np.array([[0.9, 0.8, 0.5, 0.9],    # running product 0.9, 0.72, 0.36, 0.324
                      [0.3, 0.9, 0.9, 0.9]])   # 0.3, 0.27, 0.243, 0.2187
    assert confident_length(probs, 0.5) == 2
    assert confident_length(probs, 0.3) == 4
    assert confident_length(probs[1:], 0.5) == 1  # no confident proposal: still one
    assert confident_length(probs, 0.95) == 1
    assert confident_length(probs[1:], 0.25) == 2
    assert confident_length(probs[1:], 0.24) == 3


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("threshold", [2e-3, 1e-4])
def test_a_draft_threshold_cuts_proposals_and_keeps_the_text(dflash_artifact, name, count,
                                                             threshold):
    """Each cycle verifies the proposals the random draft is confident of (its probabilities
    here are mostly 0.03-0.08, so these thresholds keep 1-4 of 4); the text equals plain
    decoding's."""
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=8, draft_threshold=threshold)
    sampling = SAMPLINGS[name]
    texts = prompts(count, seed=31)
    plain = [run_alone(plain_executor(spec), p, sampling, seed=70 + i, steps=24)
             for i, p in enumerate(texts)]
    widths = []
    confident = spec.draft.propose_with_confidence

    def recorded(requests, n_draft):
        proposals, probs = confident(requests, n_draft)
        assert n_draft == 4 and np.array_equal(proposals, spec.draft.propose(requests, n_draft))
        # each probability is the draft's softmax at its proposal, within (0, 1]
        assert ((probs > 0) & (probs <= 1)).all()
        widths.extend([confident_length(probs, threshold)] * len(requests))
        return proposals, probs

    spec.draft.propose_with_confidence = recorded
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed=70 + i)
    assert spec_decode(spec, sids, texts, 20) == [p[:20] for p in plain]
    assert spec.stats.cycles == len(widths) > 0
    assert spec.stats.proposed == sum(widths) < 4 * len(widths), widths  # cycles were cut
    assert count > 1 or len(set(widths)) > 1, widths  # alone, the cut moves from cycle to cycle
    assert spec.stats.accepted <= spec.stats.proposed


@pytest.mark.parametrize("threshold", [None, 1e-4])
def test_max_verify_rows_narrows_the_cycles_of_many_sessions(dflash_artifact, threshold):
    """With max_verify_rows 6, a cycle of one session proposes min(4, 6 - 1) = 4 tokens (at
    most), of two 6 // 2 - 1 = 2, of three or more 1; the text equals plain decoding's."""
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=8, max_verify_rows=6,
                               draft_threshold=threshold)
    sampling = SAMPLINGS["sampled"]
    texts = prompts(3, seed=12)
    plain = [run_alone(plain_executor(spec), p, sampling, seed=40 + i, steps=24)
             for i, p in enumerate(texts)]
    asked = []
    draft = spec.draft
    propose, confident = draft.propose, draft.propose_with_confidence
    draft.propose = lambda requests, n: asked.append((len(requests), n)) or propose(requests, n)
    draft.propose_with_confidence = (
        lambda requests, n: asked.append((len(requests), n)) or confident(requests, n))
    for count in (3, 2, 1):
        sids = [spec.open_session() for _ in range(count)]
        for i, sid in enumerate(sids):
            spec.set_sampling(sid, sampling, seed=40 + i)
        assert spec_decode(spec, sids, texts[:count], 20) == [p[:20] for p in plain[:count]]
        for sid in sids:
            spec.close_session(sid)
    assert {owners for owners, _ in asked} == {1, 2, 3}
    assert all(n == {1: 4, 2: 2, 3: 1}[owners] for owners, n in asked), asked
    for bad in (1, 0, 2.5, True, "6"):
        with pytest.raises(InvalidArgument, match="max_verify_rows"):
            DFlashExecutor.load(dflash_artifact, max_verify_rows=bad)


def test_the_draft_probabilities_are_the_blocks_softmax_at_each_proposal(dflash_artifact):
    """propose_with_confidence against the draft_block's own logits, softmax in float64."""
    from cellspec import artifact as names
    from cellspec.runtime.draft import ProposalRequest

    spec = DFlashExecutor.load(dflash_artifact, max_sessions=2)
    sid = spec.open_session()
    spec.set_sampling(sid, Sampling(), seed=0)
    spec_decode(spec, [sid], prompts(1, seed=5), 3)
    request = ProposalRequest(sid, spec.sessions.sessions[sid].draft.pending, spec.pos(sid))
    logits = []
    run = spec.draft._run

    def keep(engine, method, count, feeds, outputs, *args, **kwargs):
        out = run(engine, method, count, feeds, outputs, *args, **kwargs)
        logits.append(np.asarray(out[names.LOGITS], dtype=np.float64))
        return out

    spec.draft._run = keep
    proposals, probs = spec.draft.propose_with_confidence([request], 3)
    want = np.exp(logits[0][:3] - logits[0][:3].max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    assert probs.shape == proposals.shape == (1, 3)
    np.testing.assert_allclose(probs[0], want[np.arange(3), proposals[0]], rtol=1e-5)
    np.testing.assert_array_equal(proposals[0], logits[0][:3].argmax(axis=1))


def test_bad_draft_thresholds_are_refused(dflash_artifact):
    for bad in (-0.1, 1.0, 1.5, float("nan"), float("inf"), True, "0.5", np.array([0.5])):
        with pytest.raises(InvalidArgument, match="draft_threshold"):
            DFlashExecutor.load(dflash_artifact, draft_threshold=bad)
    assert DFlashExecutor.load(dflash_artifact, draft_threshold=0).draft_threshold is None
    assert DFlashExecutor.load(dflash_artifact,
                               draft_threshold=np.float32(0.25)).draft_threshold == 0.25

    class Fixed:
        def propose(self, requests, n_draft):
            return np.zeros((len(requests), n_draft), np.int64)

    with pytest.raises(InvalidArgument, match="draft_threshold needs the artifact's draft"):
        DFlashExecutor.load(dflash_artifact, proposer=Fixed(), draft_threshold=0.5)


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
    states = {sid: s.draft.pending for sid, s in spec.sessions.sessions.items()}
    sessions = {sid: (s.sampling, s.seed, s.is_poisoned)
                for sid, s in spec.sessions.sessions.items()}
    return spec.cache.snapshot(), spec.draft.cache.snapshot(), states, sessions


def test_rejected_batch_leaves_both_caches_unchanged(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=3, max_session_tokens=40)
    a, b = spec.open_session(), spec.open_session()
    spec.set_sampling(a, SAMPLINGS["sampled"], seed=1)
    spec_decode(spec, [a], [[5, 6, 7]], 6)  # a has a pending token and drained rows
    pending = spec.sessions.sessions[a].draft.pending
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
    spec.cache.check()
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
        spec.execute([BatchInput(a, (spec.sessions.sessions[a].draft.pending,), spec.pos(a))])
    assert error.value.poisoned == (a,)
    assert str(error.value).count("poisoned") == 1
    with pytest.raises(InvalidArgument, match="poisoned"):
        spec.execute([BatchInput(a, (1,), 0)])
    spec.close_session(a)
    assert spec.cache.num_used == 0 and spec.draft.cache.num_used == 0


def test_draft_blocks_need_no_free_cells(dflash_artifact):
    """Every session fills its budget in a pool sized for exactly that: the draft's blocks
    (never committed) must still run up to the last position the budget allows."""
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=5, n_draft=2)
    budget = spec.max_session_tokens
    assert 511 - 5 * budget < 4 * 4  # fewer spare cells than one call's blocks (4 owners x 4)
    sids = [spec.open_session() for _ in range(5)]
    for sid in sids:
        spec.set_sampling(sid, SAMPLINGS["greedy"])
    outs = spec.execute([BatchInput(s, tuple(range(3, 93)), 0) for s in sids])
    pending = {o.sid: o.token for o in outs}
    while all(spec.pos(s) < budget for s in sids):
        for out in spec.execute([BatchInput(s, (pending[s],), spec.pos(s)) for s in sids]):
            pending[out.sid] = out.tokens[-1]
    assert [spec.pos(s) for s in sids] == [budget] * 5
    assert spec.stats.cycles > 0
    spec.draft.cache.check()


class Truth:
    """Proposes what plain decoding would draw next, with a random error: every acceptance
    length from 0 to n_draft happens, through the real draft's drain and block calls."""

    def __init__(self, spec, reference, histories, seeds, rng):
        self.spec, self.reference, self.rng = spec, reference, rng
        self.plain_runner = plain_executor(reference)
        self.histories, self.seeds = histories, seeds

    def propose(self, requests, n_draft):
        rows = []
        for r in requests:
            rows.append(self.plain(self.histories[r.sid] + [r.anchor], self.seeds[r.sid],
                                   n_draft))
            error = int(self.rng.integers(0, n_draft + 2))
            if error < n_draft:
                rows[-1][error] = (rows[-1][error] + 1) % 250
        self.spec.draft.propose(requests, n_draft)  # the real draft runs too
        return np.asarray(rows, dtype=np.int64)

    def plain(self, tokens, seed, count):
        executor = self.plain_runner
        sid = executor.open_session()
        executor.set_sampling(sid, SAMPLINGS["sampled"], seed)
        row = [executor.execute([BatchInput(sid, tuple(tokens), 0)])[0].token]
        while len(row) < count:
            row.append(executor.execute([BatchInput(sid, (row[-1],), executor.pos(sid))])[0]
                       .token)
        executor.close_session(sid)
        return row


def check_draft_state(spec, reference, sid, history):
    """Both caches agree with the history, and the draft's keys equal a fresh replay's."""
    assert undrained(spec, sid) == spec.pos(sid)
    assert spec.pos(sid) == len(history)
    looked_up = spec.sessions.sessions[sid].draft.history
    assert looked_up is None or looked_up.tokens().tolist() == history
    if not history:
        return
    spec._drain([sid])
    ref = reference.open_session()
    reference.set_sampling(ref, SAMPLINGS["greedy"])
    reference.execute([BatchInput(ref, tuple(history), 0, False)])
    reference._drain([ref])
    for name in ("k_pool.0", "v_pool.1"):
        got = spec.draft.pools.arrays[name][spec.draft.cache.cells_of(sid)]
        want = reference.draft.pools.arrays[name][reference.draft.cache.cells_of(ref)]
        np.testing.assert_allclose(got, want, atol=1e-5)
    reference.close_session(ref)


# lookup: each chain goes on with up to that many tokens looked up in the session's text
# (test_lookup.py), whose history must follow every operation as the caches do
@pytest.mark.parametrize(("seed", "lookup"), [(0, 0), (1, 0), (4, 4)])
def test_random_operations_keep_the_draft_in_step(dflash_artifact, seed, lookup):
    rng = np.random.default_rng(seed)
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=5, max_session_tokens=80, n_draft=3,
                               lookup_tokens=lookup, lookup_match=1)
    reference = DFlashExecutor.load(dflash_artifact, max_sessions=2, max_session_tokens=80)
    histories, seeds = {}, {}
    spec.proposer = Truth(spec, reference, histories, seeds, rng)
    for _ in range(90):
        op = rng.choice(["open", "plain", "spec", "clone", "rewind", "close"],
                        p=[0.08, 0.15, 0.6, 0.07, 0.07, 0.03])
        if op == "open" or not histories:
            if spec.can_open_session():
                sid = spec.open_session()
                seeds[sid] = int(rng.integers(100))
                spec.set_sampling(sid, SAMPLINGS["sampled"], seeds[sid])
                histories[sid] = []
            continue
        sid = int(rng.choice(list(histories)))
        frontier = spec.pos(sid)
        if op == "plain":
            position, count = int(rng.integers(0, frontier + 1)), int(rng.integers(1, 6))
            if position + count > 80:
                continue
            tokens = tuple(int(t) for t in rng.integers(3, 250, size=count))
            spec.execute([BatchInput(sid, tokens, position, bool(rng.integers(2)))])
            histories[sid] = histories[sid][:position] + list(tokens)
        elif op == "spec":
            pending = spec.sessions.sessions[sid].draft.pending
            if pending is None or frontier + spec.cycle_rows > 80:
                continue
            expected = spec.proposer.plain(histories[sid] + [pending], seeds[sid],
                                           spec.cycle_rows)
            out = spec.execute([BatchInput(sid, (pending,), frontier)])[0]
            assert list(out.tokens) == expected[:len(out.tokens)]
            histories[sid] += [pending] + list(out.tokens[:-1])
        elif op == "clone" and spec.can_open_session():
            upto = int(rng.integers(0, frontier + 1))
            new = spec.clone(sid, upto)
            histories[new], seeds[new] = histories[sid][:upto], seeds[sid]
        elif op == "rewind":
            position = int(rng.integers(0, frontier + 1))
            spec.rewind(sid, position)
            histories[sid] = histories[sid][:position]
        elif op == "close":
            spec.close_session(sid)
            del histories[sid]
            continue
        for other, history in histories.items():
            check_draft_state(spec, reference, other, history)
        spec.cache.check()
        spec.draft.cache.check()
    assert spec.stats.accepted > 0 and spec.stats.bonus > 0
    assert spec.stats.accepted < spec.stats.proposed
    assert (spec.stats.looked_up > 0) == (lookup > 0)


def test_a_cycle_drains_its_verify_rows_as_it_verifies(dflash_artifact):
    """A cycle drains the verify's rows into the draft cache during the verify and rewinds the
    rejected ones from both caches: after every cycle the draft holds exactly the target's
    positions, with a fresh replay's keys, so only a cycle after plain steps drains twice."""
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, n_draft=3)
    reference = DFlashExecutor.load(dflash_artifact, max_sessions=2)
    sid = spec.open_session()
    spec.set_sampling(sid, SAMPLINGS["sampled"], seed=3)
    history = list(prompts(1, seed=9)[0])
    pending = spec.execute([BatchInput(sid, tuple(history), 0)])[0].token
    assert spec.draft.cache.pos(sid) == 0  # the prompt's taps wait in the target's cells

    def drains():
        return draft_calls(spec.draft.stats, "draft_context")

    for cycle in range(8):
        before = drains()
        out = spec.execute([BatchInput(sid, (pending,), spec.pos(sid))])[0]
        history += [pending, *out.tokens[:-1]]
        pending = out.tokens[-1]
        assert spec.draft.cache.pos(sid) == spec.pos(sid) == len(history)
        assert drains() - before == (2 if cycle == 0 else 1)
        check_draft_state(spec, reference, sid, history)
    assert spec.stats.accepted < spec.stats.proposed  # rejected rows were rewound
    spec.draft.cache.check()


def test_pool_threads_spin_on_only_where_the_target_runs_alone(dflash_artifact):
    """ort-cpu: pool threads spin within a run; a plain executor's one engine keeps them
    spinning between runs, while with a draft, whose sessions alternate with the target's, they
    stop when each run ends (idle threads would take the cores from the session running)."""
    def spinning(engine):
        options = engine.session.get_session_options()
        return (options.get_session_config_entry("session.intra_op.allow_spinning"),
                options.get_session_config_entry("session.force_spinning_stop"))

    plain = Executor.load(dflash_artifact, max_sessions=2)
    assert spinning(plain.target.engine) == ("1", "0")
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=2)
    engines = [spec.target.engine, spec.draft.context, spec.draft.block]
    assert [spinning(e) for e in engines] == [("1", "1")] * 3
