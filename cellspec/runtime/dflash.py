"""The DFlash executor: speculate-verify cycles over the batching executor.

Per session it keeps the pending token (emitted, not yet fed to the target) and the hidden rows
(taps) of verified tokens not yet drained into the draft cache: the draft cache holds positions
0..d-1, the hidden rows positions d..frontier-1. An input that is exactly the pending token at
the frontier takes the fast path: one cycle (drain, draft, verify, commit accepted + 1) instead
of a plain step. Any other input runs a plain target step. Target tokens are drawn with the
uniform of their position, so the text equals plain decoding's at any temperature.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from cellspec.errors import InvalidArgument
from cellspec.runtime.draft import DraftModel, ProposalRequest
from cellspec.runtime.executor import Executor
from cellspec.runtime.sampling import accept_count
from cellspec.runtime.types import BatchInput, Output, Sampling


class Proposer(Protocol):
    def propose(self, requests: list[ProposalRequest], n_draft: int) -> np.ndarray: ...


@dataclass
class DraftState:
    pending: int | None = None
    hidden: list[np.ndarray] = field(default_factory=list)  # one [width] row per position


@dataclass
class SpecStats:
    rounds: int = 0  # speculate() calls; each runs one cycle for every owner in it
    cycles: int = 0
    proposed: int = 0
    accepted: int = 0
    bonus: int = 0  # cycles whose every proposal was accepted
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def tau(self) -> float:
        """Mean tokens committed per cycle: accepted + 1."""
        return (self.accepted + self.cycles) / self.cycles if self.cycles else 0.0


class DFlashExecutor:
    def __init__(self, executor: Executor, draft: DraftModel | None,
                 proposer: Proposer | None = None, n_draft: int | None = None) -> None:
        self.executor = executor
        self.draft = draft
        self.proposer = proposer or draft
        if self.proposer is None:
            raise InvalidArgument("speculation needs a draft in the artifact or a proposer")
        block = executor.manifest.draft.block_size if executor.manifest.draft else None
        limit = block - 1 if block else executor.manifest.target.static_widths[-1] - 1
        n_draft = limit if n_draft is None else n_draft
        if isinstance(n_draft, bool) or not isinstance(n_draft, int) or not 2 <= n_draft <= limit:
            raise InvalidArgument(f"n_draft {n_draft!r}: expected an int in [2, {limit}]")
        self.n_draft = n_draft
        self.states: dict[int, DraftState] = {}
        self.stats = SpecStats()

    @classmethod
    def load(cls, artifact: str | Path, backend: str = "ort-cpu", max_sessions: int = 8,
             max_session_tokens: int = 0, n_draft: int | None = None,
             threads: int | None = None) -> DFlashExecutor:
        executor = Executor.load(artifact, backend, max_sessions, max_session_tokens, threads)
        if executor.manifest.draft is None:
            raise InvalidArgument(f"{artifact}: the artifact has no draft (export with --draft)")
        draft = DraftModel(Path(artifact), executor.manifest, backend, threads)
        return cls(executor, draft, None, n_draft)

    # -- sessions: the target executor's, plus draft state kept in step ---------------------

    @property
    def manifest(self):
        return self.executor.manifest

    @property
    def cache(self):
        return self.executor.cache

    @property
    def vocab_size(self) -> int:
        return self.executor.vocab_size

    @property
    def max_sessions(self) -> int:
        return self.executor.max_sessions

    @property
    def max_session_tokens(self) -> int:
        return self.executor.max_session_tokens

    def can_open_session(self) -> bool:
        return self.executor.can_open_session()

    def open_session(self) -> int:
        sid = self.executor.open_session()
        self.states[sid] = DraftState()
        if self.draft:
            self.draft.cache.seq_new(sid)
        return sid

    def close_session(self, sid: int) -> None:
        self.executor.close_session(sid)
        del self.states[sid]
        if self.draft:
            self.draft.cache.seq_rm(sid)

    def clone(self, sid: int, upto: int) -> int:
        new = self.executor.clone(sid, upto)
        source = self.states[sid]
        drained = self.draft.cache.pos(sid) if self.draft else 0
        keep = max(0, upto - drained)
        self.states[new] = DraftState(None, source.hidden[:keep])
        if self.draft:
            self.draft.cache.seq_clone(sid, new, min(upto, drained))
        return new

    def rewind(self, sid: int, pos: int) -> None:
        self.executor.rewind(sid, pos)
        self._trim(sid, pos)

    def set_sampling(self, sid: int, sampling: Sampling, seed: int | None = None) -> None:
        self.executor.set_sampling(sid, sampling, seed)

    def pos(self, sid: int) -> int:
        return self.executor.pos(sid)

    def _trim(self, sid: int, pos: int) -> None:
        """Forget what both caches and the hidden rows hold at positions >= pos."""
        state = self.states[sid]
        drained = self.draft.cache.pos(sid) if self.draft else 0
        if self.draft and pos < drained:
            self.draft.cache.rewind(sid, pos)
        del state.hidden[max(0, pos - drained):]
        state.pending = None

    # -- steps -----------------------------------------------------------------------------

    def execute(self, batch: Sequence[BatchInput]) -> list[Output | None]:
        """Run one batch: pending-token inputs speculate, the rest take a plain step."""
        self.executor.validate(batch)
        fast = [i for i, item in enumerate(batch) if self._can_speculate(item)]
        plain = [i for i in range(len(batch)) if i not in fast]
        outputs: list[Output | None] = [None] * len(batch)
        try:
            if plain:
                for i, out in zip(plain, self._plain([batch[i] for i in plain])):
                    outputs[i] = out
            if fast:
                for i, burst in zip(fast, self.speculate([batch[i] for i in fast])):
                    outputs[i] = Output(batch[i].sid, burst)
        except Exception as error:  # the caches changed: whatever failed, the batch is poisoned
            raise self.executor.poison([item.sid for item in batch], error) from error
        return outputs

    def _can_speculate(self, item: BatchInput) -> bool:
        state = self.states[item.sid]
        position = self.executor.pos(item.sid)
        return (item.produce_output and state.pending is not None
                and item.tokens == (state.pending,) and item.position == position
                and position + self.n_draft + 1 <= self.executor.max_session_tokens)

    def _plain(self, items: list[BatchInput]) -> list[Output | None]:
        for item in items:
            if item.position < self.executor.pos(item.sid):
                self._trim(item.sid, item.position)
        step = self.executor.pack(items)
        result = self.executor.run_packed(step, items)
        offset = 0
        for item in items:
            self._keep_hidden(item.sid, result.taps, offset, len(item.tokens))
            self.states[item.sid].pending = None
            offset += len(item.tokens)
        outputs = self.executor.sample_outputs(step, items, result.logits)
        for out in outputs:
            if out is not None:
                self.states[out.sid].pending = out.token
        return outputs

    def speculate(self, items: list[BatchInput]) -> list[tuple[int, ...]]:
        """One speculate-verify cycle for every item (each is its session's pending token)."""
        start = time.perf_counter()
        sids = [item.sid for item in items]
        self._drain(sids)
        requests = [ProposalRequest(item.sid, item.tokens[0], item.position) for item in items]
        proposals = self.proposer.propose(requests, self.n_draft)  # [O, n]
        width = self.n_draft + 1
        # verify [anchor, d1..dn] of every owner in one target forward, every row sampled
        tokens = np.concatenate([[r.anchor, *p] for r, p in zip(requests, proposals)])
        positions = np.concatenate([np.arange(r.position, r.position + width) for r in requests])
        seq_ids = np.repeat(sids, width)
        result = self.executor.target.forward(seq_ids, tokens.astype(np.int64), positions,
                                              np.arange(len(tokens), dtype=np.int64))
        bursts = []
        for owner, request in enumerate(requests):
            rows = result.logits[owner * width: (owner + 1) * width]
            drawn = [self.executor.sample(request.sid, rows[j], request.position + j + 1)
                     for j in range(width)]
            accepted = accept_count(proposals[owner], np.asarray(drawn[:-1]))
            burst = (*(int(t) for t in proposals[owner][:accepted]), drawn[accepted])
            # commit anchor + accepted proposals; the rejected tail leaves the target cache
            self.executor.cache.rewind(request.sid, request.position + accepted + 1)
            self._keep_hidden(request.sid, result.taps, owner * width, accepted + 1)
            self.states[request.sid].pending = burst[-1]
            self._count(accepted)
            bursts.append(burst)
        self.stats.rounds += 1
        self.stats.seconds["round"] = self.stats.seconds.get("round", 0.0) + (
            time.perf_counter() - start)
        return bursts

    def _count(self, accepted: int) -> None:
        self.stats.cycles += 1
        self.stats.proposed += self.n_draft
        self.stats.accepted += accepted
        self.stats.bonus += accepted == self.n_draft

    def _drain(self, sids: list[int]) -> None:
        """Push every owner's undrained hidden rows through draft_context in one call."""
        if not self.draft:
            return
        owners = [sid for sid in sids if self.states[sid].hidden]
        if not owners:
            return
        rows = [np.stack(self.states[sid].hidden) for sid in owners]
        starts = [self.draft.cache.pos(sid) for sid in owners]
        self.draft.drain(np.repeat(owners, [len(r) for r in rows]), np.concatenate(rows),
                         np.concatenate([np.arange(s, s + len(r)) for s, r in zip(starts, rows)]))
        for sid in owners:
            self.states[sid].hidden.clear()

    def _keep_hidden(self, sid: int, taps: np.ndarray | None, offset: int, count: int) -> None:
        if self.draft and taps is not None:
            self.states[sid].hidden.extend(taps[offset: offset + count])
