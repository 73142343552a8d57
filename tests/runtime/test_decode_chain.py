"""Decode chains (`Executor.decode`): `steps` decode steps in one call, each step's drawn tokens
fed to the next where they were drawn. On `ort-cuda` every step is queued on the stream ONNX
Runtime runs on, and the host plans the next while the device works; here the same path runs on
the IOBinding backend over numpy memory, also over a device whose work waits in a queue until
something waits for it. A chain must give exactly the tokens, cells and pool rows of `steps`
plain `execute` calls."""

import numpy as np
import pytest

from cellspec.errors import InvalidArgument
from cellspec.runtime.device import HostDevice
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput

from .test_executor import GREEDY, SAMPLED, decode, prompts
from .test_ort_device import host_backend, prefill


class QueuedDevice(HostDevice):
    """HostDevice whose work waits in a queue, as on a stream: uploads, copies, commits and
    downloads run when something waits (a mark, a synchronize, a download) or when a run
    starts (a run reads what was queued before it, and runs at once). A host that read device
    results or reused a staging buffer without waiting would see stale bytes."""

    def __init__(self):
        super().__init__()
        self.queue = []

    def upload(self, buffer, host):
        self.queue.append(lambda: HostDevice.upload(self, buffer, host))

    def copy(self, dst, src, nbytes):
        self.queue.append(lambda: HostDevice.copy(self, dst, src, nbytes))

    def download_later(self, host, ptr):
        self.queue.append(lambda: HostDevice.download_later(self, host, ptr))

    def commit(self, *args):
        self.queue.append(lambda: HostDevice.commit(self, *args))

    def gather(self, *args):
        self.queue.append(lambda: HostDevice.gather(self, *args))

    def grow_trees(self, *args):
        self.queue.append(lambda: HostDevice.grow_trees(self, *args))

    def walk_trees(self, *args):
        self.queue.append(lambda: HostDevice.walk_trees(self, *args))

    def tree_uniforms(self, *args):
        self.queue.append(lambda: HostDevice.tree_uniforms(self, *args))

    def download(self, host, buffer):
        self.synchronize()
        HostDevice.download(self, host, buffer)

    def synchronize(self):
        self.flush(len(self.queue))

    def flush(self, count):
        done, self.queue = self.queue[:count], self.queue[count:]
        for work in done:
            work()
        self.flushed = getattr(self, "flushed", 0) + count

    def mark(self, reuse=None):
        """The queue's end now; `reuse`: an earlier mark recorded again."""
        mark = reuse if reuse is not None else QueuedMark(self)
        mark.end = getattr(self, "flushed", 0) + len(self.queue)
        return mark


class QueuedMark:
    def __init__(self, device):
        self.device, self.end = device, 0

    def synchronize(self):
        self.device.flush(max(0, self.end - self.device.flushed))


def queued_backend(artifact, max_sessions):
    """host_backend over a QueuedDevice, in order as ort-cuda's: no wait before a run, which
    first runs the queue (what the stream would have done before it)."""
    backend = host_backend(artifact, max_sessions)
    backend.device, backend.in_order = QueuedDevice(), True
    load = backend.load_engine

    def load_engine(path, *projections):  # (ort-cuda's load_draft_engine passes its own)
        engine = load(path, *projections)
        run = engine._run

        def ordered(session, options):
            backend.device.synchronize()
            run(session, options)

        engine._run, engine.in_order = ordered, True
        return engine

    backend.load_engine = load_engine
    return backend


def pool_rows(executor, sid):
    pools = executor.target.pools
    rows = np.empty(pools.shape, np.float32)
    pools.device.download(rows, pools.buffers["v_pool.0"])
    return rows[executor.cache.cells_of(sid)]


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("count", [1, 3, 8])
@pytest.mark.parametrize("make", [host_backend, queued_backend], ids=["host", "queued"])
def test_a_chain_equals_plain_steps(tiny_artifact, sampling, count, make):
    """Batches 1 and 8 fill a static bucket, 3 is padded to 4 rows. On the queued device
    nothing is done until waited for, as on a stream."""
    texts = prompts(count, seed=count)
    results = []
    for chained in (False, True):
        executor = Executor.load(tiny_artifact, backend=make(tiny_artifact, 8), max_sessions=8)
        sids, firsts = prefill(executor, texts, sampling, range(40, 40 + count))
        if chained:
            outs = executor.decode([BatchInput(s, (t,), executor.pos(s))
                                    for s, t in zip(sids, firsts)], 7)
            assert [o.sid for o in outs] == sids
            tokens = [list(o.tokens) for o in outs]
            assert any(label.startswith("chain static") for label in executor.target.stats)
        else:
            tokens = decode(executor, sids, firsts, 7)
        executor.cache.check()
        results.append((tokens, [executor.pos(s) for s in sids],
                        [executor.cache.cells_of(s).tolist() for s in sids],
                        [pool_rows(executor, s) for s in sids]))
    (plain, plain_pos, plain_cells, plain_rows), (chain, pos, cells, rows) = results
    assert chain == plain
    assert pos == plain_pos == [len(t) + 7 for t in texts]
    assert cells == plain_cells
    for a, b in zip(rows, plain_rows):
        np.testing.assert_array_equal(a, b)


def test_a_chain_continues_where_plain_steps_left_off(tiny_artifact):
    """Chains of different lengths and plain steps interleave: the text is the same."""
    texts = prompts(2, seed=5)
    plain = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4), max_sessions=4)
    sids, firsts = prefill(plain, texts, GREEDY, [1, 2])
    expected = decode(plain, sids, firsts, 12)
    mixed = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4), max_sessions=4)
    sids, last = prefill(mixed, texts, GREEDY, [1, 2])
    got = [[], []]
    for steps in (1, 4, 2, 5):
        if steps == 2:
            new = decode(mixed, sids, last, 2)
        else:
            outs = mixed.decode([BatchInput(s, (t,), mixed.pos(s)) for s, t in zip(sids, last)],
                                steps)
            new = [list(o.tokens) for o in outs]
        for row, tokens in enumerate(new):
            got[row] += tokens
        last = [tokens[-1] for tokens in new]
    assert got == expected


def test_ort_cpu_chains_are_plain_steps(tiny_artifact):
    """A backend that does not run ahead runs the chain step by step: same tokens."""
    texts = prompts(3, seed=8)
    executor = Executor.load(tiny_artifact, max_sessions=4)
    assert not executor.chains_run_ahead([])
    sids, firsts = prefill(executor, texts, SAMPLED, [3, 4, 5])
    outs = executor.decode([BatchInput(s, (t,), executor.pos(s)) for s, t in zip(sids, firsts)],
                           5)
    again = Executor.load(tiny_artifact, max_sessions=4)
    sids2, firsts2 = prefill(again, texts, SAMPLED, [3, 4, 5])
    assert [list(o.tokens) for o in outs] == decode(again, sids2, firsts2, 5)


@pytest.mark.parametrize("backend", ["ort-cpu", "host", "queued"])
def test_on_step_sees_every_step_and_ends_the_chain(tiny_artifact, backend):
    """Told to stop after step 3, a chain on ort-cpu runs 3 steps; on a backend that runs ahead
    the 4th is already running and is returned too. Either way the tokens are plain decoding's,
    every step's tokens reach on_step in order, and the sessions end where the steps did."""
    texts = prompts(3, seed=12)
    plain = Executor.load(tiny_artifact, max_sessions=4)
    sids, firsts = prefill(plain, texts, SAMPLED, [5, 6, 7])
    expected = decode(plain, sids, firsts, 10)
    makers = {"ort-cpu": lambda *_: "ort-cpu", "host": host_backend, "queued": queued_backend}
    executor = Executor.load(tiny_artifact, max_sessions=4,
                             backend=makers[backend](tiny_artifact, 4))
    sids, firsts = prefill(executor, texts, SAMPLED, [5, 6, 7])
    start = [executor.pos(s) for s in sids]
    seen = []

    def on_step(tokens):
        seen.append(tokens)
        return len(seen) == 3

    outs = executor.decode([BatchInput(s, (t,), executor.pos(s)) for s, t in zip(sids, firsts)],
                           10, on_step)
    ran = 3 if backend == "ort-cpu" else 4
    assert [list(o.tokens) for o in outs] == [e[:ran] for e in expected]
    assert seen == [list(column) for column in zip(*(e[:ran] for e in expected))]
    assert [executor.pos(s) for s in sids] == [p + ran for p in start]
    executor.cache.check()


def test_bad_chains_are_refused_and_change_nothing(tiny_artifact):
    executor = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4),
                             max_sessions=4, max_session_tokens=40)
    sids, firsts = prefill(executor, prompts(2, seed=2), GREEDY, [1, 2])
    before = [(executor.pos(s), executor.cache.cells_of(s).tolist()) for s in sids]
    good = [BatchInput(s, (t,), executor.pos(s)) for s, t in zip(sids, firsts)]
    bad = {
        "steps 0": (good, 0),
        "steps 2.0": (good, 2.0),
        "steps True": (good, True),
        "two tokens": ([BatchInput(sids[0], (firsts[0], 5), executor.pos(sids[0]))], 2),
        "no output": ([BatchInput(sids[0], (firsts[0],), executor.pos(sids[0]), False)], 2),
        "behind the frontier": ([BatchInput(sids[0], (firsts[0],), executor.pos(sids[0]) - 1)],
                                2),
        "past the budget": (good, 40 - min(executor.pos(s) for s in sids) + 1),
        "one session twice": (good + good[:1], 2),
        "token outside the vocabulary": ([BatchInput(sids[0], (10 ** 6,),
                                                     executor.pos(sids[0]))], 2),
        "on_step not callable": (good, 2, "stop"),
    }
    for name, (batch, steps, *on_step) in bad.items():
        with pytest.raises(InvalidArgument):
            executor.decode(batch, steps, *on_step)
        assert [(executor.pos(s), executor.cache.cells_of(s).tolist()) for s in sids] == before, \
            name
    # the budget is exact: the last step may feed the budget's last position
    room = 40 - max(executor.pos(s) for s in sids)
    outs = executor.decode(good, room)
    assert [len(o.tokens) for o in outs] == [room, room]


def test_a_failed_run_poisons_the_chain_and_leaves_no_run_going(tiny_artifact):
    executor = Executor.load(tiny_artifact, backend=host_backend(tiny_artifact, 4),
                             max_sessions=4)
    sids, firsts = prefill(executor, prompts(2, seed=4), GREEDY, [1, 2])
    engine = executor.target.engine
    calls = []
    original = engine._run

    def fail_third(session, options):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected")
        original(session, options)

    engine._run = fail_third
    with pytest.raises(Exception, match="injected.*poisoned"):
        executor.decode([BatchInput(s, (t,), executor.pos(s)) for s, t in zip(sids, firsts)], 6)
    assert len(calls) == 3  # the chain stopped at the failed step
    with pytest.raises(Exception, match="poisoned"):
        executor.execute([BatchInput(sids[0], (1,), executor.pos(sids[0]))])
    for sid in sids:
        executor.close_session(sid)
    assert executor.cache.num_used == 0


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_dflash_chains_over_its_spec_limit_and_keeps_its_text(dflash_artifact, sampling):
    """Over max_spec_batch a DFlash executor decodes plainly: a chain there leaves each
    session's last token pending, and the cycles after it give plain decoding's text."""
    texts = prompts(3, seed=6)
    plain = Executor.load(dflash_artifact, max_sessions=4)
    sids, firsts = prefill(plain, texts, sampling, [7, 8, 9])
    expected = decode(plain, sids, firsts, 12)

    spec = DFlashExecutor.load(dflash_artifact, backend=host_backend(dflash_artifact, 4),
                               max_sessions=4, max_spec_batch=2)
    sids, firsts = prefill(spec, texts, sampling, [7, 8, 9])
    batch = [BatchInput(s, (t,), spec.pos(s)) for s, t in zip(sids, firsts)]
    assert spec.chains_run_ahead(batch)
    assert not spec.chains_run_ahead(batch[:2])  # two may speculate
    got = [list(o.tokens) for o in spec.decode(batch, 5)]
    spec.close_session(sids[2])
    last = {s: tokens[-1] for s, tokens in zip(sids, got)}
    while min(len(got[0]), len(got[1])) < 12:  # two sessions left: they speculate
        cycles = spec.stats.cycles
        outs = spec.execute([BatchInput(s, (last[s],), spec.pos(s)) for s in sids[:2]])
        assert spec.stats.cycles == cycles + 2  # the chain left their tokens pending
        for row, out in enumerate(outs):
            got[row] += out.tokens
            last[out.sid] = out.tokens[-1]
    assert [g[:12] for g in got[:2]] == expected[:2]
    assert got[2] == expected[2][:5]


def greedy_and_sampled(executor, texts):
    """Two sessions prefilled in one batch, the first greedy (seed 1), the second sampled
    (seed 2): (sids, the first token of each)."""
    sids = [executor.open_session() for _ in texts]
    executor.set_sampling(sids[0], GREEDY, 1)
    executor.set_sampling(sids[1], SAMPLED, 2)
    outs = executor.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, texts)])
    return sids, [o.token for o in outs]


def test_sampled_sessions_step_plainly_where_speculate_sampled_is_off(dflash_artifact):
    """speculate_sampled=False: in one batch the greedy session speculates at every call and
    the sampled one takes a plain step (one token); both texts are plain decoding's."""
    texts = prompts(2, seed=11)
    plain = Executor.load(dflash_artifact, max_sessions=4)
    sids, firsts = greedy_and_sampled(plain, texts)
    expected = decode(plain, sids, firsts, 10)

    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, speculate_sampled=False)
    sids, firsts = greedy_and_sampled(spec, texts)
    got, last, calls = {s: [] for s in sids}, dict(zip(sids, firsts)), 0
    while len(got[sids[1]]) < 10:
        live = [s for s in sids if len(got[s]) < 10]
        outs = spec.execute([BatchInput(s, (last[s],), spec.pos(s)) for s in live])
        calls += sids[0] in live
        for out in outs:
            assert out.sid == sids[0] or len(out.tokens) == 1
            got[out.sid] += out.tokens
            last[out.sid] = out.tokens[-1]
    assert spec.stats.cycles == calls > 0  # one cycle a call: the greedy session's
    assert [got[s][:10] for s in sids] == expected


def test_chains_run_ahead_where_no_session_can_speculate(dflash_artifact):
    texts = prompts(2, seed=12)
    off = DFlashExecutor.load(dflash_artifact, backend=host_backend(dflash_artifact, 4),
                              max_sessions=4, speculate_sampled=False)
    sids, firsts = greedy_and_sampled(off, texts)
    batch = [BatchInput(s, (t,), off.pos(s)) for s, t in zip(sids, firsts)]
    assert not off.chains_run_ahead(batch)  # the greedy session would speculate
    assert off.chains_run_ahead(batch[1:])  # the sampled one alone steps plainly: a chain
    on = DFlashExecutor.load(dflash_artifact, backend=host_backend(dflash_artifact, 4),
                             max_sessions=4)
    sids, firsts = greedy_and_sampled(on, texts)
    assert not on.chains_run_ahead([BatchInput(sids[1], (firsts[1],), on.pos(sids[1]))])


def test_a_sampled_session_that_does_not_speculate_chains_to_plain_decodings_text(
        dflash_artifact):
    """speculate_sampled=False on a backend that runs ahead (a queued device, as ort-cuda): a
    sampled session's steps run as a chain and then one at a time, never a cycle, and give
    plain decoding's tokens."""
    texts = prompts(1, seed=13)
    plain = Executor.load(dflash_artifact, max_sessions=2)
    sids, firsts = prefill(plain, texts, SAMPLED, [4])
    expected = decode(plain, sids, firsts, 9)[0]
    spec = DFlashExecutor.load(dflash_artifact, backend=queued_backend(dflash_artifact, 2),
                               max_sessions=2, speculate_sampled=False)
    sids, firsts = prefill(spec, texts, SAMPLED, [4])
    batch = [BatchInput(sids[0], (firsts[0],), spec.pos(sids[0]))]
    assert spec.chains_run_ahead(batch)
    got = list(spec.decode(batch, 6)[0].tokens)
    for _ in range(3):
        out = spec.execute([BatchInput(sids[0], (got[-1],), spec.pos(sids[0]))])[0]
        got += out.tokens
    assert got == expected and spec.stats.cycles == 0


def test_sampled_sessions_speculate_only_alone_where_speculate_sampled_is_one(dflash_artifact):
    """speculate_sampled=1: a sampled session speculates when it is the only session that could;
    beside a greedy one it steps plainly while the greedy one speculates, and two sampled ones
    both step plainly. Every text is plain decoding's."""
    texts = prompts(2, seed=14)
    plain = Executor.load(dflash_artifact, max_sessions=4)
    sids, firsts = greedy_and_sampled(plain, texts)
    expected = decode(plain, sids, firsts, 16)
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, speculate_sampled=1)
    sids, firsts = greedy_and_sampled(spec, texts)
    got, last = {s: [] for s in sids}, dict(zip(sids, firsts))
    for _ in range(6):  # both pending: each call is one cycle (the greedy session's)
        outs = spec.execute([BatchInput(s, (last[s],), spec.pos(s)) for s in sids])
        assert len(outs[1].tokens) == 1
        for out in outs:
            got[out.sid] += out.tokens
            last[out.sid] = out.tokens[-1]
    assert spec.stats.cycles == 6
    calls = 0
    while len(got[sids[1]]) < 16:  # the sampled one alone: every call is a cycle
        out = spec.execute([BatchInput(sids[1], (last[sids[1]],), spec.pos(sids[1]))])[0]
        got[sids[1]] += out.tokens
        last[sids[1]] = out.tokens[-1]
        calls += 1
    assert spec.stats.cycles == 6 + calls
    assert got[sids[0]] == expected[0][:6] and got[sids[1]][:16] == expected[1]
    # two sampled sessions pending: neither speculates
    other = spec.open_session()
    spec.set_sampling(other, SAMPLED, 3)
    first = spec.execute([BatchInput(other, tuple(texts[0]), 0)])[0].token
    pair = [BatchInput(sids[1], (last[sids[1]],), spec.pos(sids[1])),
            BatchInput(other, (first,), spec.pos(other))]
    assert spec._speculating(pair) == [] and spec._speculating(pair[:1]) == [0]


@pytest.mark.parametrize("value", [0, -1, 1.0, "no", None])
def test_speculate_sampled_must_be_a_bool_or_a_count(dflash_artifact, value):
    with pytest.raises(InvalidArgument,
                       match="speculate_sampled .*expected True, False or an int >= 1"):
        DFlashExecutor.load(dflash_artifact, max_sessions=2, speculate_sampled=value)
