"""The executor on a tiny random Llama: batch invariance, clone, rewind, cell accounting."""

import numpy as np
import pytest

from cellspec.rewrite import NEW_COLUMNS
from cellspec.runtime.executor import Executor
from cellspec.runtime.planner import ShapePolicy
from cellspec.runtime.types import BatchInput, Sampling

GREEDY = Sampling()
SAMPLED = Sampling(temperature=0.8, top_p=0.9, top_k=40)


def prompts(count, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 256, size=int(rng.integers(1, 23))).tolist() for _ in range(count)]


def decode(executor, sids, first_tokens, steps):
    """Decode `steps` tokens for each session from its frontier, all in one batch per step."""
    produced = {sid: [] for sid in sids}
    pending = dict(zip(sids, first_tokens))
    for _ in range(steps):
        batch = [BatchInput(sid, (pending[sid],), executor.pos(sid)) for sid in sids]
        for out in executor.execute(batch):
            produced[out.sid].append(out.token)
            pending[out.sid] = out.token
        executor.cache.check()
    return [produced[sid] for sid in sids]


def run_alone(executor, prompt, sampling, seed, steps):
    sid = executor.open_session()
    executor.set_sampling(sid, sampling, seed)
    first = executor.execute([BatchInput(sid, tuple(prompt), 0)])[0].token
    tokens = [first] + decode(executor, [sid], [first], steps - 1)[0]
    executor.close_session(sid)
    return tokens


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_batch_of_eight_equals_each_alone(make_executor, sampling):
    executor = make_executor()
    texts = prompts(8)
    alone = [run_alone(executor, p, sampling, seed=100 + i, steps=12) for i, p in enumerate(texts)]
    assert executor.cache.num_used == 0
    sids = [executor.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        executor.set_sampling(sid, sampling, 100 + i)
    outs = executor.execute([BatchInput(sid, tuple(p), 0) for sid, p in zip(sids, texts)])
    executor.cache.check()
    firsts = [o.token for o in outs]
    batched = [[f] + rest for f, rest in zip(firsts, decode(executor, sids, firsts, 11))]
    assert batched == alone
    assert len({tuple(t) for t in alone}) > 1  # the prompts really differ
    for sid in sids:
        executor.close_session(sid)
    executor.cache.check()
    assert executor.cache.num_used == 0


def test_seed_changes_sampled_tokens_and_is_reproducible(make_executor):
    executor = make_executor()
    prompt = prompts(1, seed=3)[0]
    a = run_alone(executor, prompt, SAMPLED, seed=1, steps=16)
    b = run_alone(executor, prompt, SAMPLED, seed=1, steps=16)
    c = run_alone(executor, prompt, SAMPLED, seed=2, steps=16)
    assert a == b and a != c


def test_clone_shares_cells_and_branches_decode_as_from_scratch(make_executor):
    executor = make_executor()
    prompt = prompts(1, seed=5)[0] + [7, 8, 9]
    reference = run_alone(executor, prompt, GREEDY, seed=0, steps=10)
    sid = executor.open_session()
    executor.set_sampling(sid, GREEDY)
    first = executor.execute([BatchInput(sid, tuple(prompt), 0)])[0].token
    used = executor.cache.num_used
    assert used == len(prompt)
    upto = len(prompt) - 2
    branch = executor.clone(sid, upto)
    executor.cache.check()
    assert executor.cache.num_used == used  # shared: nothing copied
    assert executor.pos(branch) == upto
    # the branch re-feeds the last two prompt tokens: it must continue exactly as the original
    out = executor.execute([BatchInput(branch, tuple(prompt[upto:]), upto),
                            BatchInput(sid, (first,), len(prompt))])
    assert out[0].token == first and out[1].token == reference[1]
    assert executor.cache.num_used == used + 2 + 1
    rest = decode(executor, [sid, branch], [reference[1], first], 8)
    assert [reference[0], reference[1]] + rest[0][:8] == reference[:10]
    assert [first] + rest[1] == reference[:9]
    assert executor.cache.num_used == used + 2 + 1 + 8 + 8
    executor.close_session(sid)
    executor.cache.check()
    executor.close_session(branch)
    assert executor.cache.num_used == 0


def test_rewind_then_redecode_reproduces(make_executor):
    executor = make_executor()
    sid = executor.open_session()
    executor.set_sampling(sid, SAMPLED, seed=9)
    prompt = prompts(1, seed=8)[0]
    first = executor.execute([BatchInput(sid, tuple(prompt), 0)])[0].token
    tokens = [first] + decode(executor, [sid], [first], 9)[0]
    executor.rewind(sid, len(prompt) + 3)
    executor.cache.check()
    assert executor.cache.num_used == len(prompt) + 3
    again = decode(executor, [sid], [tokens[3]], 6)[0]
    assert again == tokens[4:10]
    # a position before the frontier rewinds implicitly
    out = executor.execute([BatchInput(sid, (tokens[0],), len(prompt))])
    assert out[0].token == tokens[1]
    assert executor.pos(sid) == len(prompt) + 1
    executor.close_session(sid)
    assert executor.cache.num_used == 0


def test_padded_static_pieces_write_only_the_scratch_cell(make_executor):
    """As a GPU backend would: pieces padded to static shapes (rows to a batch bucket, width to
    a static width, cells to a power of two) give the same tokens, and the padding lands in the
    scratch cell, which no session sees."""
    texts = [[5, 6], [70, 8], [9]]  # pieces [2 x 2] -> [2 x 4] and [1 x 1]; then [3 x 1] -> 4
    unpadded = make_executor()
    expected = [run_alone(unpadded, p, SAMPLED, seed=i, steps=6) for i, p in enumerate(texts)]
    padded = make_executor()
    padded.target.policy = ShapePolicy(static_widths=(1, 4), batch_buckets=(1, 2, 4),
                                       min_cells=4, max_cells=64)
    scratch = padded.cache.scratch_cell
    sids = [padded.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        padded.set_sampling(sid, SAMPLED, i)
    outs = padded.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, texts)])
    assert np.any(padded.target.pools.arrays["k_pool.0"][scratch] != 0)
    firsts = [o.token for o in outs]
    rest = decode(padded, sids, firsts, 5)  # 3 sessions per step pad to 4 rows
    assert [[f] + r for f, r in zip(firsts, rest)] == expected
    assert all(scratch not in padded.cache.cells_of(s) for s in sids)
    assert set(padded.target.stats) == {"static 2x4", "static 1x1", "static 4x1"}


def verify_and_plain_logits(executor):
    """The logits of 4 tokens after the same prompt, fed as one 4-token step (a DFlash verify)
    and as 4 one-token steps (plain decoding)."""
    prompt, extra = np.array(prompts(1)[0] + [7, 9, 11]), np.array([5, 17, 29, 41])
    rows = []
    for widths in ([1, 1, 1, 1], [4]):
        sid = executor.open_session()
        executor.target.forward(np.full(len(prompt), sid), prompt, np.array([len(prompt) - 1]))
        logits, at = [], 0
        for width in widths:
            out = executor.target.forward(np.full(width, sid), extra[at:at + width],
                                          np.arange(width))
            logits.extend(out.logits)
            at += width
        rows.append(logits)
        executor.close_session(sid)
    return rows


def test_with_a_draft_a_verify_row_is_the_plain_step_bit_for_bit(dflash_artifact):
    """Speculation exact bit for bit on the CPU: a token's logits are the same fed in a verify
    and fed alone after the tokens before it, because ort-cpu runs a target that has a draft
    with its attention by position and a dummy query (cellspec/rewrite/attention.py)."""
    executor = Executor.load(dflash_artifact, max_sessions=8)
    assert NEW_COLUMNS in executor.target.engine.inputs
    for plain, verify in zip(*verify_and_plain_logits(executor)):
        np.testing.assert_array_equal(verify, plain)


def test_without_a_draft_the_target_runs_as_exported(make_executor):
    """A target that never verifies keeps the exported attention (faster); there a verify row
    and the plain step differ in the last bits, which is why the draft's target does not."""
    executor = make_executor()
    assert NEW_COLUMNS not in executor.target.engine.inputs
    plain, verify = verify_and_plain_logits(executor)
    assert any(not np.array_equal(a, b) for a, b in zip(plain, verify))
    assert max(float(np.abs(a - b).max()) for a, b in zip(plain, verify)) < 1e-5


@pytest.mark.parametrize("name", ["mistral_window", "qwen3_window"])
def test_by_position_keeps_sliding_windows(name, tmp_path, monkeypatch):
    """Sliding-window targets with a draft (windows of 5 and 4, a 13-token prompt): by position,
    a verify row is the plain step bit for bit, and the logits are the exported attention's up
    to rounding (a wrongly moved window mask would change them by far more)."""
    import cellspec.runtime.ort_cpu as ort_cpu
    from cellspec.export import ExportConfig, export
    from tests.conftest import make_tiny_model
    from tests.reference.zlab_draft import write_random_draft

    model = make_tiny_model(name)
    model.save_pretrained(tmp_path / "target")
    config = model.config
    write_random_draft(tmp_path / "draft", hidden=config.hidden_size, vocab=config.vocab_size,
                       num_target_layers=config.num_hidden_layers, taps=[0, 1], block_size=5,
                       mask_token_id=config.vocab_size - 1, num_layers=1)
    out = tmp_path / "artifact"
    export(tmp_path / "target", out, ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=32,
                                                  max_context=128, max_cells=512),
           progress=False, draft=tmp_path / "draft")
    by_position = Executor.load(out, max_sessions=4)
    monkeypatch.setattr(ort_cpu, "_by_position", lambda path: None)
    exported = Executor.load(out, max_sessions=4)
    assert NEW_COLUMNS in by_position.target.engine.inputs
    assert NEW_COLUMNS not in exported.target.engine.inputs
    plain, verify = (np.array(rows) for rows in verify_and_plain_logits(by_position))
    np.testing.assert_array_equal(verify, plain)
    reference = np.array(verify_and_plain_logits(exported)[0])
    np.testing.assert_allclose(plain, reference, rtol=0, atol=1e-5)
    assert not np.array_equal(plain, reference)  # the two forms do round differently
