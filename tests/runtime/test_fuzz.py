"""Random operations, valid and invalid, on both executors (seeded, bounded in time), on
ort-cpu and on the IOBinding backend `ort-cuda` runs (over host memory: its bindings, staged
inputs, commits through pointer tables, draws by the graphs, trees grown and walked "on the
device").

Every token an executor produces is checked against a solo replay: a fresh plain executor
fed the session's whole history in one step must draw the same token at that position (with
speculation too: speculation never changes the text). Every refused operation must leave the
caches, the sessions and the pools exactly as they were. Injected engine failures must poison
exactly the batch's sessions.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from cellspec.errors import ExecutionFailed, InvalidArgument
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling

from .test_decode_chain import queued_backend
from .test_ort_device import host_backend

OPERATIONS = 1500
SECONDS = 45  # the bound in time: stop early rather than slow CI down
BUDGET = 96
SAMPLINGS = [Sampling(), Sampling(temperature=0.8, top_p=0.9), Sampling(1.2, 1.0, 20)]


def state(executor) -> tuple:
    """A deep snapshot: cell caches, sessions (with draft state), pools."""
    sessions = tuple(sorted(
        (sid, s.sampling, s.seed, s.is_poisoned,
         None if s.draft is None else s.draft.pending)
        for sid, s in executor.sessions.sessions.items()))
    draft = getattr(executor, "draft", None)
    row_pools = [executor.target.pools, executor.target.taps, draft and draft.pools]
    pools = tuple(b for p in row_pools if p for b in pool_bytes(p))
    caches = (executor.cache.snapshot(), draft.cache.snapshot() if draft else None)
    return caches, sessions, pools


def pool_bytes(pools) -> list[bytes]:
    """Every pool's bytes: numpy pools' arrays (ort-cpu), or device pools' buffers, downloaded
    (the IOBinding backend's, here over host memory)."""
    if hasattr(pools, "arrays"):
        return [a.tobytes() for a in pools.arrays.values()]
    found = []  # a download waits for the device's work before it
    for buffer in pools.buffers.values():
        rows = np.empty(pools.max_cells * pools.row_bytes, np.uint8)
        pools.device.download(rows, buffer)
        found.append(rows.tobytes())
    return found


class Fuzzer:
    def __init__(self, executor, reference: Executor, rng: np.random.Generator) -> None:
        self.ex, self.ref, self.rng = executor, reference, rng
        self.history: dict[int, list[int]] = {}  # tokens the target holds, by position
        self.sampling: dict[int, tuple[Sampling, int] | None] = {}
        self.vocab = executor.vocab_size
        self.counts = dict(outputs=0, refusals=0, poisoned=0, chained=0)

    # -- helpers ---------------------------------------------------------------------------

    def live(self) -> list[int]:
        return sorted(self.history)

    def pick(self) -> int | None:
        live = self.live()
        return int(self.rng.choice(live)) if live else None

    def tokens(self, count: int) -> list[int]:
        return [int(t) for t in self.rng.integers(4, self.vocab, count)]

    def replay(self, sid: int, prefix: list[int]) -> int:
        """The token a fresh plain session draws after `prefix`."""
        sampling, seed = self.sampling[sid]
        ref = self.ref.open_session()
        self.ref.set_sampling(ref, sampling, seed)
        token = self.ref.execute([BatchInput(ref, tuple(prefix), 0)])[0].token
        self.ref.close_session(ref)
        return token

    def refuse(self, call) -> None:
        before = state(self.ex)
        with pytest.raises(InvalidArgument):
            call()
        assert state(self.ex) == before
        self.counts["refusals"] += 1

    # -- operations ------------------------------------------------------------------------

    def op_open(self) -> None:
        if not self.ex.can_open_session():
            self.refuse(self.ex.open_session)
            return
        sid = self.ex.open_session()
        self.history[sid], self.sampling[sid] = [], None

    def op_close(self) -> None:
        sid = self.pick()
        if sid is None or self.rng.random() < 0.2:
            self.refuse(lambda: self.ex.close_session(10_000))
            return
        self.ex.close_session(sid)
        del self.history[sid], self.sampling[sid]

    def op_clone(self) -> None:
        sid = self.pick()
        if sid is None:
            return
        upto = int(self.rng.integers(0, len(self.history[sid]) + 2))
        if upto > len(self.history[sid]) or not self.ex.can_open_session():
            self.refuse(lambda: self.ex.clone(sid, upto))
            return
        new = self.ex.clone(sid, upto)
        self.history[new] = self.history[sid][:upto]
        self.sampling[new] = self.sampling[sid]

    def op_rewind(self) -> None:
        sid = self.pick()
        if sid is None:
            return
        pos = int(self.rng.integers(-1, len(self.history[sid]) + 2))
        if not 0 <= pos <= len(self.history[sid]):
            self.refuse(lambda: self.ex.rewind(sid, pos))
            return
        self.ex.rewind(sid, pos)
        del self.history[sid][pos:]

    def op_sampling(self) -> None:
        sid = self.pick()
        if sid is None:
            return
        bad_seeds = [-1, 2**64, True, 1.5, "7"]
        if self.rng.random() < 0.3:
            seed = bad_seeds[int(self.rng.integers(len(bad_seeds)))]
            self.refuse(lambda: self.ex.set_sampling(sid, SAMPLINGS[1], seed))
            return
        sampling = SAMPLINGS[int(self.rng.integers(len(SAMPLINGS)))]
        seed = int(self.rng.integers(0, 2**63)) if self.rng.random() < 0.5 else \
            np.uint64(self.rng.integers(0, 2**63))
        self.ex.set_sampling(sid, sampling, seed)
        self.sampling[sid] = (sampling, int(seed))

    def op_execute(self) -> None:
        chosen = [s for s in self.live() if self.rng.random() < 0.6][:4]
        batch = [self.make_input(sid) for sid in chosen]
        batch = [b for b in batch if b is not None]
        if not batch:
            return
        outputs = self.ex.execute(batch)
        for item, out in zip(batch, outputs):
            position = int(item.position)
            fed = [int(t) for t in item.tokens]
            self.history[item.sid][position:] = fed
            if out is None:
                assert not item.produce_output
                continue
            assert out.sid == item.sid and item.produce_output
            self.check_drawn(item.sid, out.tokens)

    def op_decode(self) -> None:
        """A decode chain (`decode`: the LLM's plain decoding) of sessions whose drawn token
        waits at their frontier, up to 6 steps, stopped early by on_step at random; or a call
        it must refuse whole."""
        ready = [s for s in self.live() if s in self.pending and self.sampling[s] is not None
                 and len(self.history[s]) + 8 < BUDGET - 20 and self.rng.random() < 0.6][:4]
        if not ready:
            return
        batch = [BatchInput(s, (self.pending[s],), len(self.history[s])) for s in ready]
        steps = int(self.rng.integers(1, 7))
        if self.rng.random() < 0.2:
            sid, frontier = ready[0], len(self.history[ready[0]])
            bad = [
                (batch, 0), (batch, 1.5), (batch, "2"), (batch, True),
                ([BatchInput(sid, (self.pending[sid], 5), frontier)], steps),
                ([BatchInput(sid, (self.pending[sid],), frontier, False)], steps),
                ([BatchInput(sid, (self.pending[sid],), frontier - 1)], steps)
                if frontier > 0 else (batch, -1),
                ([BatchInput(sid, (self.pending[sid],), frontier)], BUDGET),
                (batch + [batch[0]], steps),
            ]
            items, count = bad[int(self.rng.integers(len(bad)))]
            self.refuse(lambda: self.ex.decode(items, count))
            return
        stop_at = int(self.rng.integers(1, steps + 1))
        seen = []

        def on_step(tokens):
            seen.append(list(tokens))
            return len(seen) >= stop_at

        outputs = self.ex.decode(batch, steps, on_step if self.rng.random() < 0.5 else None)
        for item, out in zip(batch, outputs, strict=True):
            assert out.sid == item.sid and 1 <= len(out.tokens) <= steps
            self.history[item.sid].append(int(item.tokens[0]))
            self.check_drawn(item.sid, out.tokens)
            self.counts["chained"] += len(out.tokens)
        # on_step saw every step's tokens in input order, as far as it was called
        assert all(step == [out.tokens[k] for out in outputs] for k, step in enumerate(seen))

    def check_drawn(self, sid: int, tokens) -> None:
        """Each token `sid` drew after its history against the solo replay of its prefix; all
        but the last join the history, the last waits as the session's pending token."""
        for j, token in enumerate(tokens):
            prefix = self.history[sid] + list(tokens[:j])
            assert token == self.replay(sid, prefix), (sid, len(prefix))
            self.counts["outputs"] += 1
        self.history[sid] += list(tokens[:-1])
        self.pending[sid] = tokens[-1]

    def make_input(self, sid: int) -> BatchInput | None:
        frontier = len(self.history[sid])
        wants = self.sampling[sid] is not None and self.rng.random() < 0.8
        pending = self.pending.get(sid)
        if pending is not None and self.rng.random() < 0.7 and frontier < BUDGET - 20:
            tokens, position = [pending], frontier  # the speculative fast path
        else:
            position = int(self.rng.integers(max(0, frontier - 3), frontier + 1))
            tokens = self.tokens(int(self.rng.integers(1, 6)))
        if position + len(tokens) > BUDGET - 20:
            return None
        self.pending.pop(sid, None)
        cast = [int, np.int64, np.uint64][int(self.rng.integers(3))]
        return BatchInput(sid, tuple(cast(t) for t in tokens), cast(position), wants)

    def op_bad_batch(self) -> None:
        sid = self.pick()
        if sid is None:
            return
        frontier = len(self.history[sid])
        closed = max(self.history, default=0) + 100
        bad = [
            [BatchInput(closed, (5,), 0)],
            [BatchInput(sid, (self.vocab,), frontier)],
            [BatchInput(sid, (-1,), frontier)],
            [BatchInput(sid, (True,), frontier)],
            [BatchInput(sid, (2.5,), frontier)],
            [BatchInput(sid, (), frontier)],
            [BatchInput(sid, (5,), -1)],
            [BatchInput(sid, (5,), frontier + 1)],
            [BatchInput(sid, (5,) * (BUDGET + 1 - frontier), frontier)],
            [BatchInput(sid, (5,), frontier), BatchInput(sid, (6,), frontier)],
            [BatchInput(sid, (5,), frontier, "yes")],
            [(sid, (5,), frontier)],
            [],
        ]
        if self.sampling[sid] is None:
            bad.append([BatchInput(sid, (5,), frontier, True)])
        self.refuse(lambda: self.ex.execute(bad[int(self.rng.integers(len(bad)))]))

    def op_failure(self, monkeypatch) -> None:
        """An engine call fails mid-step: exactly the batch's sessions are poisoned."""
        live = self.live()
        ready = [s for s in live if len(self.history[s]) + 1 < BUDGET - 20]
        if not ready:
            return
        batch = [BatchInput(s, (5,), len(self.history[s]), False) for s in ready[:2]]
        others = {s: self.ex.sessions.sessions[s].is_poisoned for s in live if s not in ready[:2]}

        def broken(*args, **kwargs):
            raise RuntimeError("injected device failure")

        with monkeypatch.context() as patch:
            # every way a backend starts engine work (a device backend also launches steps
            # into chains and queues them)
            for entry in ("run", "launch", "queue"):
                if hasattr(self.ex.backend, entry):
                    patch.setattr(self.ex.backend, entry, broken)
            with pytest.raises(ExecutionFailed, match="injected device failure"):
                self.ex.execute(batch)
        for item in batch:
            assert self.ex.sessions.sessions[item.sid].is_poisoned
            self.refuse(lambda sid=item.sid: self.ex.rewind(sid, 0))
            self.ex.close_session(item.sid)
            del self.history[item.sid], self.sampling[item.sid]
            self.pending.pop(item.sid, None)
        assert {s: self.ex.sessions.sessions[s].is_poisoned for s in others} == others
        self.counts["poisoned"] += len(batch)

    def run(self, operations: int, monkeypatch) -> None:
        self.pending: dict[int, int] = {}
        names = ["open", "close", "clone", "rewind", "sampling", "execute", "bad", "failure",
                 "decode"]
        weights = np.array([0.1, 0.05, 0.07, 0.07, 0.1, 0.45, 0.14, 0.02, 0.1])
        deadline = time.monotonic() + SECONDS
        for _ in range(operations):
            if time.monotonic() > deadline:
                break
            name = names[int(self.rng.choice(len(names), p=weights / weights.sum()))]
            if name == "failure":
                self.op_failure(monkeypatch)
            elif name == "bad":
                self.op_bad_batch()
            else:
                getattr(self, f"op_{name}")()
            self.ex.cache.check()
            for sid, tokens in self.history.items():
                assert self.ex.pos(sid) == len(tokens)


def fuzz(executor, reference: Executor, seed: int, monkeypatch) -> None:
    """OPERATIONS random operations on `executor`, each token against `reference`'s solo
    replay; then every session closed, and no cell of either cache left in use."""
    fuzzer = Fuzzer(executor, reference, np.random.default_rng(seed))
    fuzzer.run(OPERATIONS, monkeypatch)
    assert fuzzer.counts["outputs"] > 200 and fuzzer.counts["refusals"] > 100
    assert fuzzer.counts["chained"] > 20
    for sid in list(fuzzer.history):
        executor.close_session(sid)
    assert executor.cache.num_used == 0
    draft = getattr(executor, "draft", None)
    assert draft is None or draft.cache.num_used == 0


# device: `ort-cuda`'s backend (its bindings, staging, pools committed through pointer tables,
# draws by the graphs) over host memory, every token against ort-cpu's solo replay
@pytest.mark.parametrize(("seed", "device"), [(0, False), (1, False), (0, True)],
                         ids=["0", "1", "0-device"])
def test_fuzz_plain_executor(tiny_artifact, monkeypatch, seed, device):
    backend = host_backend(tiny_artifact, 5, "decomposed") if device else "ort-cpu"
    executor = Executor.load(tiny_artifact, backend=backend, max_sessions=5,
                             max_session_tokens=BUDGET)
    reference = Executor.load(tiny_artifact, max_sessions=1, max_session_tokens=BUDGET)
    fuzz(executor, reference, seed, monkeypatch)


# lookup: chains go on with tokens looked up in each session's text (lookup_match 1, so that
# random tokens find some)
@pytest.mark.parametrize(("seed", "max_spec_batch", "device", "lookup"),
                         [(0, None, False, 0), (1, 2, False, 0), (0, None, True, 0),
                          (2, None, False, 4)],
                         ids=["0", "1-limit-2", "0-device", "2-lookup"])
def test_fuzz_dflash_executor(dflash_artifact, monkeypatch, seed, max_spec_batch, device,
                              lookup):
    backend = host_backend(dflash_artifact, 5, "decomposed") if device else "ort-cpu"
    executor = DFlashExecutor.load(dflash_artifact, backend=backend, max_sessions=5,
                                   max_session_tokens=BUDGET, n_draft=3,
                                   max_spec_batch=max_spec_batch, lookup_tokens=lookup,
                                   lookup_match=1)
    reference = Executor.load(dflash_artifact, max_sessions=1, max_session_tokens=BUDGET)
    fuzz(executor, reference, seed, monkeypatch)
    assert executor.stats.cycles > 20
    assert (executor.stats.plain_over_limit > 0) == (max_spec_batch is not None)
    assert (executor.stats.looked_up > 0) == (lookup > 0)


@pytest.mark.parametrize("queued", [False, True], ids=["host", "queued"])
def test_fuzz_tree_speculation_on_the_device_backend(dflash_artifact, monkeypatch, queued):
    """Trees of proposals as `ort-cuda` runs them with CellAttention: grown and walked on the
    device, the next verify queued at the verdict (the backend told it may verify trees over
    the exported attention, whose rows the tiny model's tokens are far from rounding apart;
    the reference decodes plainly over the same backend and form: test_trees.tree_backend).
    Queued: over a device whose work waits until something waits for it, as on a stream
    (test_decode_chain.QueuedDevice): a host that read a result or reused a buffer too early
    would see stale bytes."""
    backend = queued_backend(dflash_artifact, 5) if queued else \
        host_backend(dflash_artifact, 5, "as-exported")
    backend.exact_trees = True
    executor = DFlashExecutor.load(dflash_artifact, backend=backend, max_sessions=5,
                                   max_session_tokens=BUDGET, tree_nodes=7)
    reference = Executor.load(dflash_artifact,
                              backend=host_backend(dflash_artifact, 1, "as-exported"),
                              max_sessions=1, max_session_tokens=BUDGET)
    fuzz(executor, reference, 0, monkeypatch)
    assert executor.stats.cycles > 20 and executor.stats.proposed == 7 * executor.stats.cycles
    # some cycles grew their trees on the device and walked the next block there (most
    # operations here drop a verify queued ahead: a rewind, a clone, another batch)
    assert executor.stats.grown > 0 and executor.stats.walked > 0
