"""The DFlash executor: speculate-verify cycles on top of the batching executor.

It is an `Executor` with a draft: every session carries a `DraftState` (the pending token,
emitted and not yet fed to the target). The draft cache holds positions 0..d-1 of a session;
the taps of positions d..frontier-1 wait in the target's taps pool, in their tokens' cells,
until a cycle drains them into the draft cache. An input that is exactly the pending token at
the frontier takes the fast path: one cycle (drain, draft, verify, commit accepted + 1) instead
of a plain step. A cycle drains the verify's rows while the verify runs (on a device the host's
work of that drain overlaps the verify's), then rewinds both caches past the accepted ones, so
the next cycle usually has nothing left to drain first (with trees, every row is drained keyed
at its depth's position and both caches keep the accepted path). Any other input runs a plain target
step. Target tokens are drawn with the uniform of their position, so the
text equals plain decoding's at any temperature.

`draft_threshold` t (0 < t < 1): each cycle proposes only as far as the draft is confident, the
leading proposals whose running product of the draft's probabilities stays >= t (at least one,
at most n_draft; the most any owner keeps when several speculate), so that a verify is not
widened for proposals that will likely be rejected (on the CPU a verify costs more with every
row). The verify is unchanged, so the text is too. `max_verify_rows`: a cycle of O owners
proposes at most max_verify_rows // O - 1 tokens each (at least one), so that the verify of
many sessions stays narrow.

`max_spec_batch`: when more inputs of one batch could speculate, they all take a plain step
instead (their taps wait in the pool and are drained at the next cycle). On the CPU a verify
costs about its width in steps, so a cycle for many sessions costs more than it saves.

`tree_nodes` B: each cycle verifies a tree of B proposals grown from the draft's top choices
per block row instead of a chain (runtime/trees.py): one target step whose rows each see only
their ancestors, the accepted path kept. Only where the backend verifies a tree as plain
decoding rounds (`Backend.exact_trees`: ort-cuda with CellAttention). At its verdict a tree
cycle queues the next cycle's draft block (`queue_ahead`) and, where the backend `launches`,
the next cycle's verify too (`verify_ahead`), uncommitted: the next cycle finishes it where
nothing changed in between, else drops it (it changed nothing the caches hold). A plain step (a
prompt's prefill) whose sessions would all speculate at the next call queues their first cycle
the same way (`queue_first_cycle`). `tree_choices` c (1..TOP_K, all where None): a tree takes
the first c choices of each row; c = 1 grows the chain of first choices as a tree, so that a
chain's cycle is queued on the device as a tree's is (no host round trip between the block and
the verify), without the siblings at one position that slow CellAttention's verify.

`lookup_tokens` m > 0 (chains only): after the draft's proposals (cut by the threshold), each
owner's chain goes on with up to m tokens looked up in its own text (runtime/lookup.py): those
that followed the latest earlier occurrence of its last `lookup_match` or more tokens (the
anchor and the draft's proposals included), as far as the row limits allow. A small model's
answers repeat their prompt and themselves, where a block draft guesses less well. The verify
checks them as any proposal, so the text is the same.

`speculate_sampled=False`: sessions that draw with a temperature always take plain steps (their
verify's sampler costs more than their acceptance saves on some backends); greedy ones in the
same batch still speculate. An int n: they speculate when at most n sessions of the step could
(sampled or not), else they step plainly. Either way the text is plain decoding's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

import numpy as np

from cellspec import artifact as names
from cellspec.errors import InvalidArgument
from cellspec.manifest_fields import is_int
from cellspec.runtime.backend import Backend, TreeGrowth, TreeVerdict
from cellspec.runtime.device import MAX_TREE_ROWS
from cellspec.runtime.draft import DraftModel, ProposalRequest
from cellspec.runtime.draws import Draws
from cellspec.runtime.executor import Executor, load_parts
from cellspec.runtime.lookup import LOOKUP_MATCH, TokenHistory, continuation
from cellspec.runtime.sampling import accept_count
from cellspec.runtime.sessions import DraftState, Session
from cellspec.runtime.spec_options import (
    check_draft_threshold,
    check_lookup,
    check_max_verify_rows,
    check_speculate_sampled,
    check_tree_choices,
    confident_length,
)
from cellspec.runtime.target import ForwardResult, TreeStep
from cellspec.runtime.trees import DraftTree, grow_tree, tree_capacity, walk
from cellspec.runtime.types import BatchInput, Output, replaced


class Proposer(Protocol):
    def propose(self, requests: list[ProposalRequest], n_draft: int) -> np.ndarray: ...


@dataclass
class SpecStats:
    rounds: int = 0  # speculate() calls; each runs one cycle for every owner in it
    cycles: int = 0
    proposed: int = 0
    accepted: int = 0
    bonus: int = 0  # cycles whose every proposal was accepted
    looked_up: int = 0  # proposals looked up in the sessions' text (lookup_tokens), and
    looked_up_accepted: int = 0  # how many of those were accepted
    grown: int = 0  # rounds whose trees grew on the device (verify_ahead, grow_on_device)
    walked: int = 0  # rounds that queued the next block and verify before their verdict
    plain_over_limit: int = 0  # batches stepped plainly: more than max_spec_batch could speculate
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def tau(self) -> float:
        """Mean tokens committed per cycle: accepted + 1."""
        return (self.accepted + self.cycles) / self.cycles if self.cycles else 0.0


@dataclass
class _VerifyAhead:
    """A verify queued at a tree cycle's verdict for the next cycle (`verify_ahead`), with
    what must not have changed for that cycle to take it."""

    requests: list[ProposalRequest]
    nodes: int
    version: int  # the target cache's, which its plan was made against
    draft_version: int
    runs: int | None  # the target engine's runs after it
    samplings: list[tuple]  # each session's (sampling, seed)
    trees: list[DraftTree] | Callable[[], list[DraftTree]]  # the call: grown on the device
    finish: Callable[[Callable[[], None] | None], ForwardResult]
    stride: int  # draws per owner in the target's GREEDY (the verify step's slots per row)
    tokens_first: bool  # its draws come back by a copy queued behind it (launch_tree)
    # where it or its block was queued before the last verdict: whether the device walked
    # the last trees as the host did (else its inputs or its trees' are wrong: dropped)
    walked_as_host: Callable[[], bool] | None = None


@dataclass
class _PastVerdict:
    """The next cycle's verify, queued before this cycle's verdict (_launch_past_verdict)."""

    step: TreeStep
    growth: TreeGrowth
    finish: Callable[..., ForwardResult]  # finish(meanwhile, plan=the rebased plan)


def _grown(growth: TreeGrowth) -> list[DraftTree]:
    """The trees grown on the device, once they are (their record [owners, 3, rows])."""
    return [DraftTree.from_record(record) for record in growth.fetch()]


class DFlashExecutor(Executor):
    # False: a cycle's verified rows wait for the next cycle's drain (the order before
    # 2026-12-02; the same text), for benchmarks that compare the two in one process
    drain_behind_verify = True
    # a tree cycle queues the next cycle's draft block of its sessions on the device as soon
    # as its verdict is in (where the backend queues runs), so the block runs while the host
    # returns the tokens and comes back; the next cycle takes it if it is of the same sessions
    # at the same anchors and the draft has not changed; False: each cycle runs its own block
    # (as before 2026-12-04), for benchmarks that compare the two in one process
    queue_ahead = True
    # with queue_ahead, a tree cycle also queues the next cycle's verify at its verdict (on a
    # backend that `launches`): it waits for the block queued ahead, grows the trees and
    # queues the verify uncommitted, so that the return to the caller and the next call run
    # behind it; the next cycle finishes it if it is of the same sessions at the same anchors
    # and nothing changed since, else drops it (False: as before 2026-12-04's second sitting)
    verify_ahead = True
    # a verify queued ahead grows its trees on the device, from the block's outputs into its
    # staged inputs (a sampled row taking its depth's uniform there), so it is queued right
    # behind the block, without the choices' round trip to the host (where the backend
    # `grows_trees`: ort-cuda; sampled sessions since 2026-12-04's fourth sitting); False: the
    # host grows them from the fetched choices (as in 2026-12-04's second sitting)
    grow_on_device = True
    # a cycle that finishes a verify grown on the device queues the next cycle's draft block
    # and verify behind it before the verdict is on the host: the device walks the trees by
    # the verify's draws into their staged inputs (TreeVerdict), so the device goes from the
    # verify to the drain behind it, the next block and the next verify with no wait for the
    # host, which walks, keeps the paths and rebases the next verify's plan meanwhile; it
    # checks the device's paths against its own at the next cycle, which drops that verify
    # where they differ (False: both are queued after the host's walk, as in 2026-12-04's
    # second sitting; sampled sessions walk since its fourth)
    walk_on_device = True
    # a plain step (a prompt's prefill) whose sessions would all speculate at the next call
    # queues that call's first cycle as a verdict queues the next (`_queue_first_cycle`), so
    # the first verify no longer waits for the host's return and a block run after it (False:
    # the first cycle runs its own, as before 2026-12-04's sixth sitting)
    queue_first_cycle = True

    def __init__(self, *args, draft: DraftModel | None = None,
                 proposer: Proposer | None = None, n_draft: int | None = None,
                 max_spec_batch: int | None = None,
                 draft_threshold: float | None = None,
                 max_verify_rows: int | None = None, speculate_sampled: bool | int = True,
                 tree_nodes: int | None = None, lookup_tokens: int = 0,
                 lookup_match: int = LOOKUP_MATCH, tree_choices: int | None = None) -> None:
        super().__init__(*args)
        self.draft = draft
        self.proposer = proposer or draft
        if self.proposer is None:
            raise InvalidArgument("speculation needs a draft in the artifact or a proposer")
        block = self.manifest.draft.block_size if self.manifest.draft else None
        limit = block - 1 if block else self.manifest.target.static_widths[-1] - 1
        n_draft = limit if n_draft is None else n_draft
        if isinstance(n_draft, bool) or not isinstance(n_draft, int) or not 2 <= n_draft <= limit:
            raise InvalidArgument(f"n_draft {n_draft!r}: expected an int in [2, {limit}]")
        self.n_draft = n_draft
        if max_spec_batch is not None and not (is_int(max_spec_batch) and max_spec_batch >= 1):
            raise InvalidArgument(f"max_spec_batch {max_spec_batch!r}: expected an int >= 1 or "
                                  "None (no limit)")
        self.max_spec_batch = None if max_spec_batch is None else int(max_spec_batch)
        self.draft_threshold = check_draft_threshold(draft_threshold)
        self.max_verify_rows = check_max_verify_rows(max_verify_rows)
        self.speculate_sampled = check_speculate_sampled(speculate_sampled)
        if self.draft_threshold is not None and (
                proposer is not None or draft is None
                or names.LOGITS not in draft.block.outputs):
            raise InvalidArgument("draft_threshold needs the artifact's draft, whose draft_block "
                                  f"outputs {names.LOGITS}")
        self.tree_nodes = self._check_tree_nodes(tree_nodes)
        self.tree_choices = self._check_tree_choices(tree_choices)
        self.lookup_tokens, self.lookup_match = check_lookup(lookup_tokens, lookup_match)
        if self.lookup_tokens and self.tree_nodes is not None:
            raise InvalidArgument("lookup_tokens and tree_nodes: looked-up tokens extend a "
                                  "chain; a tree verifies the draft's choices only")
        # the most proposals of one owner's chain: the draft's, then the looked-up ones
        self.chain_limit = min(self.n_draft + self.lookup_tokens, self.target.max_width - 1)
        # the cells a cycle writes: its verify's rows
        self.cycle_rows = max(self.chain_limit, self.tree_nodes or 0) + 1
        self.stats = SpecStats()
        # the next cycle's draft block, queued: (its request, the call that takes its choices)
        self._ahead: tuple[list[ProposalRequest], Callable] | None = None
        # the next cycle's verify, queued at the last verdict (see _launch_verify)
        self._ahead_verify: _VerifyAhead | None = None

    def _check_tree_choices(self, choices: int | None) -> int:
        """The choices of each block row a tree may take (`tree_choices`): 1..TOP_K, TOP_K
        where None; only with trees, and enough for `tree_nodes` nodes."""
        if check_tree_choices(choices) is None:
            return names.TOP_K
        if self.tree_nodes is None:
            raise InvalidArgument("tree_choices: chains take the first choice of each row "
                                  "already; it shapes trees (tree_nodes)")
        most = tree_capacity(choices, self.n_draft)
        if self.tree_nodes > most:
            raise InvalidArgument(f"tree_choices {choices} with n_draft {self.n_draft}: trees "
                                  f"of at most {most} nodes, not tree_nodes {self.tree_nodes}")
        return choices

    def _check_tree_nodes(self, nodes: int | None) -> int | None:
        """None (chains), or an int in [2, widest step - 1] where trees can be verified
        exactly: on such a backend, with a proposer of choices, no threshold, no window."""
        if nodes is None:
            return None
        limit = self.target.max_width - 1
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 2 <= nodes <= limit:
            raise InvalidArgument(f"tree_nodes {nodes!r}: expected an int in [2, {limit}] or "
                                  "None (chains)")
        if not self.backend.exact_trees:
            raise InvalidArgument(f"tree_nodes: backend {self.backend.name} cannot verify a "
                                  "tree as plain decoding rounds (ort-cuda with CellAttention, "
                                  "its default where cellspec's CUDA library builds, can)")
        if not hasattr(self.proposer, "propose_choices") or (
                self.proposer is self.draft and not self.draft.has_choices):
            raise InvalidArgument(f"tree_nodes: the draft_block of {self.folder} gives no "
                                  f"{names.TOP_IDS} (exported before trees: export it again)")
        if self.draft_threshold is not None:
            raise InvalidArgument("tree_nodes and draft_threshold: a tree takes no threshold")
        if self.manifest.window:
            raise InvalidArgument("tree_nodes: the target has sliding-window layers, whose "
                                  "masks a tree step does not make")
        return nodes

    @classmethod
    def load(cls, artifact: str | Path, backend: str | Backend = "ort-cpu", max_sessions: int = 8,
             max_session_tokens: int = 0, threads: int | None = None,
             proposer: Proposer | None = None, n_draft: int | None = None,
             max_spec_batch: int | None = None,
             draft_threshold: float | None = None,
             max_verify_rows: int | None = None,
             speculate_sampled: bool | int = True,
             tree_nodes: int | None = None, lookup_tokens: int = 0,
             lookup_match: int = LOOKUP_MATCH,
             tree_choices: int | None = None) -> DFlashExecutor:
        """Load an artifact with its draft (or, for tests, any `proposer`)."""
        check_draft_threshold(draft_threshold)  # before the engines load
        check_max_verify_rows(max_verify_rows)
        check_speculate_sampled(speculate_sampled)
        check_lookup(lookup_tokens, lookup_match)
        check_tree_choices(tree_choices)
        parts = load_parts(artifact, backend, max_sessions, max_session_tokens, threads)
        folder, manifest, engines = parts[:3]
        if proposer is None and manifest.draft is None:
            raise InvalidArgument(f"{artifact}: the artifact has no draft (export with --draft)")
        draft = None if proposer else DraftModel(folder, manifest, engines)
        return cls(*parts, draft=draft, proposer=proposer, n_draft=n_draft,
                   max_spec_batch=max_spec_batch, draft_threshold=draft_threshold,
                   max_verify_rows=max_verify_rows, speculate_sampled=speculate_sampled,
                   tree_nodes=tree_nodes, lookup_tokens=lookup_tokens,
                   lookup_match=lookup_match, tree_choices=tree_choices)

    # -- session hooks: the draft cache follows the target ---------------------------------

    def _opened(self, session: Session) -> None:
        session.draft = DraftState(history=TokenHistory() if self.lookup_tokens else None)
        if self.draft:
            self.draft.cache.seq_new(session.sid)

    def _closed(self, sid: int) -> None:
        if self.draft:
            self.draft.cache.seq_rm(sid)

    def _cloned(self, source: Session, clone: Session, upto: int) -> None:
        """The clone shares the target cells (and so the taps) below `upto`, and the source's
        drained draft cells below it."""
        history = source.draft.history
        clone.draft = DraftState(history=None if history is None else history.copy(upto))
        if self.draft:
            drained = self.draft.cache.pos(source.sid)
            self.draft.cache.seq_clone(source.sid, clone.sid, min(upto, drained))

    def _rewound(self, sid: int, pos: int) -> None:
        """Forget what the draft cache holds at positions >= pos (taps left in freed cells are
        never read)."""
        self._rewind_draft(sid, pos)
        state = self.sessions.sessions[sid].draft
        state.pending = None
        if state.history is not None:
            state.history.truncate(pos)

    def _rewind_draft(self, sid: int, pos: int) -> None:
        if self.draft and pos < self.draft.cache.pos(sid):
            self.draft.cache.rewind(sid, pos)

    # -- steps -----------------------------------------------------------------------------

    def execute(self, batch: Sequence[BatchInput]) -> list[Output | None]:
        """Run one batch: pending-token inputs speculate (at most `max_spec_batch` of them, else
        none), the rest take a plain step."""
        batch = self.validate(batch)
        fast = self._speculating(batch)
        if self._over_spec_batch(len(fast)):
            fast = []
            self.stats.plain_over_limit += 1
        plain = [i for i in range(len(batch)) if i not in fast]
        outputs: list[Output | None] = [None] * len(batch)
        try:
            if plain:
                for i, out in zip(plain, self._plain([batch[i] for i in plain])):
                    outputs[i] = out
                    self._record(batch[i].sid, batch[i].position, batch[i].tokens)
            if fast:
                for i, burst in zip(fast, self.speculate([batch[i] for i in fast])):
                    outputs[i] = Output(batch[i].sid, burst)
                    self._record(batch[i].sid, batch[i].position,
                                 (*batch[i].tokens, *burst[:-1]))
            else:
                self._queue_first_cycle(outputs)
        except Exception as error:  # the caches changed: whatever failed, the batch is poisoned
            raise self.poison([item.sid for item in batch], error) from error
        return outputs

    def decode(self, batch: Sequence[BatchInput], steps: int,
               on_step: Callable[[list[int]], bool] | None = None) -> list[Output]:
        """Plain decode steps (see Executor.decode); each session's last token is pending after
        (its taps wait in the pool for the next cycle's drain), as after `_plain`."""
        outputs = super().decode(batch, steps, on_step)
        for item, out in zip(batch, outputs):
            self._state(out.sid).pending = out.tokens[-1]
            self._record(out.sid, item.position, (*item.tokens, *out.tokens[:-1]))
        return outputs

    def _record(self, sid: int, position: int, tokens: Sequence[int]) -> None:
        """The tokens now in `sid`'s cache from `position` on, in its text (lookup_tokens)."""
        history = self._state(sid).history
        if history is not None:
            history.write(position, tokens)

    def chains_run_ahead(self, batch: Sequence[BatchInput]) -> bool:
        """Only where `execute` would not speculate: no session of the batch could (a sampled
        one where speculate_sampled is off, or one near its budget), or too many could
        (max_spec_batch)."""
        if not self.backend.runs_ahead:
            return False
        fast = self._speculating([item for item in batch if item.sid in self.sessions])
        return not fast or self._over_spec_batch(len(fast))

    def _over_spec_batch(self, count: int) -> bool:
        """Whether `count` sessions that could speculate are more than one step speculates for
        (max_spec_batch: they all step plainly instead)."""
        return self.max_spec_batch is not None and count > self.max_spec_batch

    def _queue_first_cycle(self, outputs: list[Output | None]) -> None:
        """After a plain step (a prompt's prefill, typically) whose every input gave a token, and
        whose sessions would all speculate at the next call if it fed those tokens back: queue
        that call's first tree cycle now, as a cycle's verdict queues the next one (the drain of
        the step's taps, the draft block and, on a backend that `launches`, the verify,
        uncommitted), so that the host's return to the caller and the next call run behind it
        on the device. The next call finishes it where it is that call's cycle (`_verify_taken`),
        else drops it (it changed nothing the caches hold). The text is the same either way."""
        if not (self.queue_first_cycle and self.tree_nodes is not None
                and self.queue_ahead and self.verify_ahead
                and self.backend.launches and self.proposer is self.draft
                and outputs and all(out is not None for out in outputs)):
            return
        following = [BatchInput(out.sid, (out.token,), self.cache.pos(out.sid))
                     for out in outputs if out is not None]
        fast = self._speculating(following)
        if len(fast) != len(following) or self._over_spec_batch(len(fast)):
            return
        requests = [ProposalRequest(item.sid, item.tokens[0], item.position)
                    for item in following]
        self._drain([r.sid for r in requests])
        take = self.draft.queue_choices(requests, self.n_draft)
        if take is None:
            return
        self._ahead = (requests, take)
        self._launch_verify(requests, self._tree_size(len(requests)))

    def _tree_size(self, owners: int) -> int:
        """The nodes of each owner's tree in a cycle of `owners` (max_verify_rows)."""
        nodes = self.tree_nodes
        assert nodes is not None
        if self.max_verify_rows is not None:
            nodes = max(1, min(nodes, self.max_verify_rows // owners - 1))
        return nodes

    def _speculating(self, batch: Sequence[BatchInput]) -> list[int]:
        """The indices of the inputs that may speculate (before max_spec_batch): a sampled one
        only where speculate_sampled allows it (True; n: at most n inputs could)."""
        fast = [i for i, item in enumerate(batch) if self._can_speculate(item)]
        limit = self.speculate_sampled
        if not isinstance(limit, bool) and len(fast) > limit:
            fast = [i for i in fast if not self._samples(batch[i].sid)]
        return fast

    def _samples(self, sid: int) -> bool:
        sampling = self.sessions.sessions[sid].sampling
        return bool(sampling) and not sampling.is_greedy

    def _can_speculate(self, item: BatchInput) -> bool:
        session = self.sessions.sessions[item.sid]
        if self.speculate_sampled is False and self._samples(item.sid):
            return False
        state = session.draft
        position = self.cache.pos(item.sid)
        return (item.produce_output and state.pending is not None
                and item.tokens == (state.pending,) and item.position == position
                and self._cycle_fits(position))

    def _cycle_fits(self, position: int) -> bool:
        """Whether a cycle's verify rows from `position` fit the session's budget."""
        return position + self.cycle_rows <= self.max_session_tokens

    def _plain(self, items: list[BatchInput]) -> list[Output | None]:
        step = self.pack_checked(tuple(items))  # validated by execute
        result = self.run_packed(step)
        for item in step.batch:
            self._state(item.sid).pending = None
        outputs = self.make_outputs(step, result)
        for out in outputs:
            if out is not None:
                self._state(out.sid).pending = out.token
        return outputs

    def speculate(self, items: list[BatchInput]) -> list[tuple[int, ...]]:
        """One speculate-verify cycle for every item (each is its session's pending token)."""
        start = time.perf_counter()
        sids = [item.sid for item in items]
        self._drain(sids)
        requests = [ProposalRequest(item.sid, item.tokens[0], item.position) for item in items]
        if self.tree_nodes is not None:
            bursts = self._speculate_tree(requests)
        else:
            bursts = self._speculate_chain(requests)
        self.stats.rounds += 1
        self.stats.seconds["round"] = self.stats.seconds.get("round", 0.0) + (
            time.perf_counter() - start)
        return bursts

    def _speculate_tree(self, requests: list[ProposalRequest]) -> list[tuple[int, ...]]:
        """Each owner's tree of `tree_nodes` proposals (runtime/trees.py) verified in one
        target step; the accepted path is kept, the other rows leave the cache."""
        nodes = self._tree_size(len(requests))
        # while the verify runs, every row of every tree goes into the draft cache as into
        # the target's: in row order, each keyed at its depth's position (draft_context is
        # row-wise, so a row's keys are what its position would give on the accepted path);
        # after the verdict both caches keep the accepted path, and the next cycle has
        # nothing to drain first
        ahead = self._verify_taken(requests, nodes)
        verdict: tuple[TreeVerdict, Callable] | None = None  # the walk, the block's choices
        launched: _PastVerdict | None = None
        if ahead is not None:  # queued at the last cycle's verdict: running already
            grown = callable(ahead.trees)
            trees = ahead.trees() if grown else ahead.trees
            self.stats.grown += grown

            def behind() -> None:  # queued behind the verify: its drain, the next cycle's
                nonlocal verdict, launched  # block and verify where walked on the device
                self._drain_trees(requests, trees)
                if grown:
                    verdict = self._queue_past_verdict(requests, nodes, ahead.stride)
                if verdict is not None and ahead.tokens_first:
                    launched = self._launch_past_verdict(requests, nodes, ahead.stride)

            result = ahead.finish(behind)
        else:
            # the verify is planned first: where this cycle's block was queued ahead, the
            # host plans while the device runs the block
            step = self.target.plan_tree(np.array([r.sid for r in requests], np.int64),
                                         nodes + 1)
            step, trees, tokens, parents, draws = self._tree_verify(
                requests, nodes, step, *self._choices(requests))
            result = self.target.forward_tree(step, tokens, parents, draws,
                                              meanwhile=lambda: self._drain_trees(requests,
                                                                                  trees))
        width = trees[0].rows
        paths, bursts = [], []
        for owner, (request, tree) in enumerate(zip(requests, trees)):
            path, burst = walk(tree, result.tokens[owner * width: (owner + 1) * width])
            if self.draft:
                self.draft.cache.keep_path(request.sid, request.position, path)
            self._state(request.sid).pending = burst[-1]
            self._count(len(path) - 1, width - 1)
            paths.append(path)
            bursts.append(burst)
        walked_as_host = None
        if verdict is None:
            after = self._queue_ahead(requests, paths, bursts)
        else:  # queued already, its inputs walked on the device
            after = self._advanced(requests, paths, bursts)
            walked, take = verdict
            self._ahead = (after, take)
            expected = np.array([[len(path), burst[-1]] for path, burst in zip(paths, bursts)])
            fetch = walked.fetch
            assert fetch is not None
            walked_as_host = lambda: np.array_equal(fetch(), expected)  # noqa: E731
        for request, path in zip(requests, paths):  # (host work only: after the queueing)
            self.cache.keep_path(request.sid, request.position, path)
        if launched is not None:  # queued already: its plan now follows the paths kept
            assert after is not None
            self._ahead = None
            self.stats.walked += 1
            plan = self.cache.rebase_step(launched.step.plan)
            self._ahead_verify = self._verify_ahead(
                after, nodes, plan.version, partial(_grown, launched.growth),
                partial(launched.finish, plan=plan), launched.step.stride,
                launched.finish.tokens_first, walked_as_host)
        elif after is not None:
            self._launch_verify(after, nodes, walked_as_host)
        return bursts

    def _tree_verify(self, requests: list[ProposalRequest], nodes: int, step: TreeStep,
                     ids: np.ndarray, logp: np.ndarray
                     ) -> tuple[TreeStep, list[DraftTree], np.ndarray, np.ndarray, Draws]:
        """The verify of each owner's tree grown from its choices ids/logp [O, n, k]: its
        step (`step`, planned for nodes + 1 rows, or planned again where fewer choices give
        a smaller tree), the trees, their rows' tokens and parents [O, rows], the draws."""
        trees = [grow_tree(ids[o], logp[o], nodes, self.tree_choices)
                 for o in range(len(requests))]
        width = trees[0].rows
        if width != step.width:  # fewer choices than nodes: a smaller tree
            step = self.target.plan_tree(step.plan.seq_ids[: step.owners], width)
        tokens = np.array([[r.anchor, *t.tokens] for r, t in zip(requests, trees)], np.int64)
        parents = np.stack([t.parents for t in trees])
        # each row drawn with the uniform of the position after it, as plain decoding would
        positions = [r.position + int(d) + 1 for r, t in zip(requests, trees) for d in t.depths]
        draws = self.draws([r.sid for r in requests for _ in range(width)], positions)
        return step, trees, tokens, parents, draws

    def _launch_verify(self, after: list[ProposalRequest], nodes: int,
                       walked_as_host: Callable[[], bool] | None = None) -> None:
        """At a tree verdict, after the next cycle's block was queued (`_queue_ahead`, whose
        requests are `after`): take its choices and queue the next cycle's verify too, left
        uncommitted (TargetModel.launch_tree), so that the host's return to the caller and
        the next call run behind it (`verify_ahead`). The next cycle finishes it where
        `_verify_taken` says it is still that cycle's verify. walked_as_host: where the block
        was queued before the verdict (`walk_on_device`), the check of its paths."""
        if not (self.verify_ahead and self.backend.launches and self._ahead is not None):
            return
        step = self.target.plan_tree(np.array([r.sid for r in after], np.int64), nodes + 1)
        if self._grows_trees(nodes):
            # the block's outputs are this block's: nothing ran since it was queued above
            self._ahead = None
            growth, finish = self._launch_grown(after, nodes, step)
            trees: list[DraftTree] | Callable[[], list[DraftTree]] = partial(_grown, growth)
        else:
            choices = self._choices(after)  # the block queued ahead
            step, trees, tokens, parents, draws = self._tree_verify(after, nodes, step, *choices)
            finish = self.target.launch_tree(step, tokens, parents, draws)
        self._ahead_verify = self._verify_ahead(after, nodes, step.plan.version, trees, finish,
                                                step.stride, finish.tokens_first,
                                                walked_as_host)

    def _launch_grown(self, requests: list[ProposalRequest], nodes: int, step: TreeStep,
                      walk: TreeVerdict | None = None) -> tuple[TreeGrowth, Callable]:
        """Queue the verify of `requests` planned as `step` (nodes + 1 rows each,
        uncommitted), its trees grown on the device from the draft block's outputs: staged
        as a chain with the anchors only. Returns the growth and launch_tree's finish."""
        owners = len(requests)
        tokens = np.zeros((owners, nodes + 1), np.int64)
        tokens[:, 0] = [r.anchor for r in requests]
        # the draws of the positions after each anchor, staged as a chain's (0 for greedy
        # rows); a sampled tree row takes its position's uniform on the device from them
        # (TreeGrowth.uniforms): as far as its depths go past the longest path a walk before
        # the run may accept
        sampled = any(self._samples(r.sid) for r in requests)
        span = nodes + 1 + (min(nodes, self.n_draft) + 1 if sampled else 0)
        chain = self.draws([r.sid for r in requests for _ in range(span)],
                           [r.position + j + 1 for r in requests for j in range(span)])
        draws = chain.take((np.arange(owners)[:, None] * span
                            + np.arange(nodes + 1)).reshape(-1))
        uniforms = chain.uniform.reshape(owners, span) if sampled else None
        growth = TreeGrowth(self.draft.block, owners, self.n_draft, nodes, step.stride,
                            uniforms, choices=self.tree_choices)
        return growth, self.target.launch_tree(step, tokens, None, draws, grow=growth,
                                               walk=walk)

    def _verify_ahead(self, after: list[ProposalRequest], nodes: int, version: int,
                      trees: list[DraftTree] | Callable[[], list[DraftTree]],
                      finish: Callable, stride: int, tokens_first: bool,
                      walked_as_host: Callable[[], bool] | None) -> _VerifyAhead:
        """The next cycle's verify, queued, with the state `_verify_taken` checks (the caches
        and the target engine as they are now, each session's sampling)."""
        return _VerifyAhead(after, nodes, version, self.draft.cache.version,
                            self._target_runs(), self._samplings(after), trees, finish, stride,
                            tokens_first, walked_as_host)

    def _grows_trees(self, nodes: int) -> bool:
        """Whether the next verify's trees grow on the device (`grow_on_device`): where the
        backend can and the choices hold `nodes` nodes (greedy or sampled: a sampled row's
        uniform, its position's, is set on the device too)."""
        return (self.grow_on_device and self.backend.grows_trees
                and nodes < MAX_TREE_ROWS
                and tree_capacity(self.tree_choices, self.n_draft) >= nodes)

    def _verify_taken(self, requests: list[ProposalRequest], nodes: int
                      ) -> _VerifyAhead | None:
        """The verify queued at the last cycle's verdict, where it is this cycle's: the same
        sessions at the same anchors and positions, the same tree size, and since then no
        change to either cache, no other run of the target, the same sampling for every
        session, and where its block was queued before the last verdict, the device's walk of
        the last trees the host's. Else None: it is dropped (it changed nothing the caches
        hold)."""
        ahead, self._ahead_verify = self._ahead_verify, None
        if ahead is None or ahead.requests != requests or ahead.nodes != nodes:
            return None
        if (ahead.version != self.cache.version
                or ahead.draft_version != self.draft.cache.version
                or ahead.runs != self._target_runs()
                or ahead.samplings != self._samplings(requests)
                or (ahead.walked_as_host is not None and not ahead.walked_as_host())):
            return None
        return ahead

    def _target_runs(self) -> int | None:
        return getattr(self.target.engine, "runs", None)

    def _samplings(self, requests: list[ProposalRequest]) -> list[tuple]:
        sessions = self.sessions.sessions
        return [(sessions[r.sid].sampling, sessions[r.sid].seed) for r in requests]

    def _queue_ahead(self, requests: list[ProposalRequest], paths: list[list[int]],
                     bursts: list[tuple[int, ...]]) -> list[ProposalRequest] | None:
        """After a tree verdict (the draft cache final), queue the next cycle's draft block
        of the same sessions, where each could speculate again and one block call holds them
        (`queue_ahead`; DraftModel.queue_choices refuses more than one call holds); returns
        the next cycle's requests where it did."""
        if not self.queue_ahead or self.proposer is not self.draft:
            return None
        after = self._advanced(requests, paths, bursts)
        if not all(self._cycle_fits(a.position) for a in after):
            return None
        take = self.draft.queue_choices(after, self.n_draft)
        self._ahead = None if take is None else (after, take)
        return None if take is None else after

    @staticmethod
    def _advanced(requests: list[ProposalRequest], paths: list[list[int]],
                  bursts: list[tuple[int, ...]]) -> list[ProposalRequest]:
        """The next cycle's requests of the same sessions, past their accepted paths."""
        return [ProposalRequest(r.sid, burst[-1], r.position + len(path))
                for r, path, burst in zip(requests, paths, bursts)]

    def _queue_past_verdict(self, requests: list[ProposalRequest], nodes: int, stride: int
                            ) -> tuple[TreeVerdict, Callable] | None:
        """Behind a verify whose trees grew on the device (and its drain), queue the next
        cycle's draft block of the same sessions before the verdict is on the host, its inputs
        walked on the device (`walk_on_device`): where the next cycle's verify would grow its
        trees from it on the device too (`_launch_verify`), and every session's next cycle
        fits whatever the verdict. Returns the walk's TreeVerdict and the block's choices
        (queue_choices: never taken, since keep_path changes the draft), or None where not
        queued."""
        if not (self.walk_on_device and self.queue_ahead and self.verify_ahead
                and self.proposer is self.draft and self.backend.launches
                and self._grows_trees(nodes)):
            return None
        longest = min(nodes, self.n_draft) + 1  # the rows of a tree's deepest path
        if not all(self._cycle_fits(r.position + longest) for r in requests):
            return None
        verdict = TreeVerdict(self.target.engine, stride, len(requests), nodes + 1)
        take = self.draft.queue_choices(requests, self.n_draft, walk=verdict)
        return None if take is None else (verdict, take)

    def _launch_past_verdict(self, requests: list[ProposalRequest], nodes: int, stride: int
                             ) -> _PastVerdict | None:
        """Behind the block `_queue_past_verdict` queued, the next cycle's verify of the same
        sessions, before the verdict: planned from this cycle's anchors with every row of
        their trees in the cache (their cells stay taken, so the new rows' cells are others),
        its trees grown from that block; the device first walks this cycle's trees into its
        staged anchors, positions, cell table and mask (TargetModel.launch_tree's walk). The
        cycle rebases its plan once the host has kept the paths. None where the pool has no
        free cells for it beside this cycle's rows (the cycle queues it after its walk, when
        keep_path has freed the rows off the paths)."""
        owners = len(requests)
        if self.cache.num_free < owners * (nodes + 1):
            return None
        step = self.target.plan_tree(np.array([r.sid for r in requests], np.int64), nodes + 1)
        # each row's positions from its anchor's, where the walk starts (rebase_step gives
        # the plan its own positions again)
        positions = step.plan.positions.copy()
        positions[:owners] = np.array([[r.position] for r in requests])
        step = replaced(step, plan=replaced(step.plan, positions=positions))
        # (the walk writes the next anchors over these)
        growth, finish = self._launch_grown(requests, nodes, step, walk=TreeVerdict(
            self.target.engine, stride, owners, nodes + 1, fetched=False))
        return _PastVerdict(step, growth, finish)

    def _choices(self, requests: list[ProposalRequest]) -> tuple[np.ndarray, np.ndarray]:
        """The proposer's top choices for `requests` (propose_choices): the block queued ahead
        at the last cycle's verdict where it is this cycle's and the draft has not changed
        since, else a block run now."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == requests:
            choices = ahead[1]()
            if choices is not None:
                return choices
        return self.proposer.propose_choices(requests, self.n_draft)

    def _speculate_chain(self, requests: list[ProposalRequest]) -> list[tuple[int, ...]]:
        """Each owner's n_draft proposals verified as a chain in one target step."""
        sids = [r.sid for r in requests]
        n_draft = self.n_draft
        if self.max_verify_rows is not None:
            n_draft = max(1, min(n_draft, self.max_verify_rows // len(requests) - 1))
        if self.draft_threshold is not None and self.proposer is self.draft:
            drafted, probs = self.draft.propose_with_confidence(requests, n_draft)
            proposals = drafted[:, : confident_length(probs, self.draft_threshold)]
        else:  # no threshold, or a proposer without probabilities (tests swap one in)
            proposals = drafted = self.proposer.propose(requests, n_draft)  # [O, n]
        drafted_count, found = proposals.shape[1], [0] * len(requests)
        if self.lookup_tokens:
            proposals, found = self._looked_up(requests, proposals, drafted)
        n_draft = proposals.shape[1]
        width = n_draft + 1
        # verify [anchor, d1..dn] of every owner in one target forward: every row is drawn
        # with the uniform of the position its token would occupy, as plain decoding would
        tokens = np.concatenate([[r.anchor, *p] for r, p in zip(requests, proposals)])
        positions = [r.position + j + 1 for r in requests for j in range(width)]
        draws = self.draws([sid for sid in sids for _ in range(width)], positions)
        # while the verify runs, every verified row's taps go into the draft cache (a row's
        # taps are its position's whatever the verdict; the rejected ones are rewound below)
        result = self.target.forward(np.repeat(sids, width), tokens.astype(np.int64),
                                     np.arange(len(tokens), dtype=np.int64), draws,
                                     meanwhile=(lambda: self._drain(sids))
                                     if self.drain_behind_verify else None)
        bursts = []
        for owner, request in enumerate(requests):
            drawn = result.tokens[owner * width: (owner + 1) * width]
            accepted = accept_count(proposals[owner], drawn[:-1])
            burst = (*(int(t) for t in proposals[owner][:accepted]), int(drawn[accepted]))
            # commit anchor + accepted proposals; the rejected tail leaves both caches
            self.cache.rewind(request.sid, request.position + accepted + 1)
            self._rewind_draft(request.sid, request.position + accepted + 1)
            self._state(request.sid).pending = burst[-1]
            self._count(accepted, n_draft)
            self.stats.looked_up_accepted += min(max(0, accepted - drafted_count),
                                                 found[owner])
            bursts.append(burst)
        return bursts

    def _looked_up(self, requests: list[ProposalRequest], proposals: np.ndarray,
                   drafted: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Each owner's proposals [O, k], then up to lookup_tokens tokens looked up in its own
        text (anchor and proposals included) as far as the chain limit and the row limit allow;
        the chains made equally long (one verify) with the draft's further proposals, then
        repeats of their last token: any proposal is checked, so a filler costs only its row.
        Returns the chains and how many tokens of each were looked up."""
        limit = self.chain_limit
        if self.max_verify_rows is not None:
            limit = max(1, min(limit, self.max_verify_rows // len(requests) - 1))
        room = limit - proposals.shape[1]
        chains, counts = [], []
        for request, row in zip(requests, proposals.tolist()):
            history = self._state(request.sid).history
            found = []
            if room > 0 and history is not None and history.length == request.position:
                found = continuation(history.tokens(), [request.anchor, *row],
                                     self.lookup_match, min(room, self.lookup_tokens))
            self.stats.looked_up += len(found)
            chains.append(row + found)
            counts.append(len(found))
        width = max(len(chain) for chain in chains)
        for chain, further in zip(chains, drafted.tolist()):
            chain += further[len(chain): width]
            chain += chain[-1:] * (width - len(chain))
        return np.asarray(chains, dtype=proposals.dtype), counts

    def _state(self, sid: int) -> DraftState:
        return self.sessions.sessions[sid].draft

    def _count(self, accepted: int, n_draft: int) -> None:
        self.stats.cycles += 1
        self.stats.proposed += n_draft
        self.stats.accepted += accepted
        self.stats.bonus += accepted == n_draft

    def _drain(self, sids: list[int]) -> None:
        """Push every owner's undrained positions (draft frontier .. target frontier) through
        draft_context in one call, their taps gathered by cell from the target's taps pool."""
        self._drain_cells([(sid, self.cache.cells_of(sid)[self.draft.cache.pos(sid):])
                           for sid in sids] if self.draft else [])

    def _drain_trees(self, requests: list[ProposalRequest], trees: list[DraftTree]) -> None:
        """Drain every row of each owner's verified tree (its cells, which the cache holds in
        row order from the anchor's position, the draft's frontier) keyed at position + depth."""
        if self.draft:
            assert all(self.draft.cache.pos(r.sid) == r.position for r in requests)
            self._drain_cells([(r.sid, self.cache.cells_of(r.sid)[r.position:][: t.rows])
                               for r, t in zip(requests, trees)],
                              np.concatenate([r.position + t.depths
                                              for r, t in zip(requests, trees)]))

    def _drain_cells(self, runs: list[tuple[int, np.ndarray]],
                     positions: np.ndarray | None = None) -> None:
        """draft_context in one call over each (sid, cells): the taps in those target cells at
        the sid's next draft positions (keyed at `positions` where given: DraftModel.drain)."""
        runs = [(sid, cells) for sid, cells in runs if cells.size]
        if not runs:
            return
        seq_ids = np.concatenate([np.full(cells.size, sid) for sid, cells in runs])
        self.draft.drain(seq_ids.astype(np.int64), np.concatenate([c for _, c in runs]),
                         self.target.taps, positions)
