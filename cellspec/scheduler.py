"""Continuous batching: requests join and leave between steps; each step is one executor batch.

A step packs one decode token for every running request whose prompt is in the cache, then
prefill chunks of the others, oldest first, at most `max_prefill_tokens` prompt tokens in all so
long prompts never starve decoding. A prompt is cut on a grid of `max_prefill_tokens` from its
start, whatever else runs: where a prompt's tokens split between steps changes how its attention
rounds (ONNX Runtime's CPU attention sums keys in SIMD lanes, and a token's lane follows its
column), so cuts that depended on the batch would make a request's text depend on its batch. A
chunk that does not fit what is left of the step's budget waits for a later step (the oldest
waiting chunk always fits: a step's budget is one whole chunk). The chunk that ends a prompt asks
for the first output token.
Each request owns one session from admission to finish; `abort` closes whatever is still open.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Sequence

from cellspec.errors import InvalidArgument
from cellspec.request import Request
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput

DEFAULT_MAX_PREFILL_TOKENS = 256
# Where the executor's backend runs ahead (ort-cuda), a step that only decodes becomes a chain
# of up to this many decode steps (Executor.decode): the host plans each while the device runs
# the one before, and takes each step's tokens one step behind. A chain ends at the step after
# a request finishes (that step's tokens still count for the others); a stream gets its text a
# chain at a time.
DEFAULT_CHAIN_STEPS = 16
# on_prefill(done, total): `done` of the `total` prompt tokens added so far are in the cache.
PrefillCallback = Callable[[int, int], None]


def check_chain_steps(value: object) -> int:
    return _at_least_one("chain_steps", value, " (1: no chains)")


def _at_least_one(name: str, value: object, note: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"{name} {value!r}: expected an integer >= 1{note}")
    return value


class Scheduler:
    def __init__(self, executor: Executor | DFlashExecutor, eos_token_ids: Collection[int],
                 max_prefill_tokens: int = DEFAULT_MAX_PREFILL_TOKENS,
                 on_prefill: PrefillCallback | None = None,
                 chain_steps: int = DEFAULT_CHAIN_STEPS) -> None:
        _at_least_one("max_prefill_tokens", max_prefill_tokens)
        self.executor = executor
        self.chain_steps = check_chain_steps(chain_steps)
        self.eos_token_ids = frozenset(eos_token_ids)
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.on_prefill = on_prefill
        self.num_prompt_tokens = 0  # of every request added
        self.num_prefilled = 0  # of those, the tokens fed to the executor so far

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: Request) -> None:
        self.waiting.append(request)
        self.num_prompt_tokens += len(request.prompt_token_ids)

    def step(self) -> list[Request]:
        """Admit, run one batch, and retire; returns the requests that finished."""
        self._admit()
        batch = self.make_batch()
        by_sid = {r.sid: r for r in self.running}
        num_prefill = sum(len(b.tokens) for b in batch if not by_sid[b.sid].is_prefilled)
        steps = self.chain_length(batch)
        if steps > 1:  # each step's tokens are taken as they come; a finished request ends it
            requests = [by_sid[item.sid] for item in batch]
            self.executor.decode(batch, steps, lambda tokens: any(
                [self._take(request, (token,)) for request, token in zip(requests, tokens)]))
        else:
            for item, output in zip(batch, self.executor.execute(batch)):
                if output is not None:
                    self._take(by_sid[item.sid], output.tokens)
        for item in batch:
            by_sid[item.sid].num_computed = self.executor.pos(item.sid)
        finished = [r for r in self.running if r.finish_reason is not None]
        for request in finished:
            self._retire(request)
        self._report_prefill(num_prefill)
        return finished

    def chain_length(self, batch: list[BatchInput]) -> int:
        """How many decode steps the batch runs as one chain: 1 (a plain `execute`) unless it
        only decodes, no waiting request could start now, and the executor's chains run ahead;
        never past a request's max_tokens or its session's budget."""
        if (self.chain_steps == 1 or not all(r.is_prefilled for r in self.running)
                or (self.waiting and self.executor.can_open_session())
                or not self.executor.chains_run_ahead(batch)):
            return 1
        budget = self.executor.max_session_tokens
        room = min(min(r.params.max_tokens - len(r.token_ids), budget - r.num_tokens)
                   for r in self.running)
        return max(1, min(self.chain_steps, room))

    def _take(self, request: Request, tokens: Sequence[int]) -> bool:
        """Append `tokens` to the request until it finishes (later ones are dropped); whether
        it has finished."""
        for token in tokens:
            if request.finish_reason is not None:
                break
            request.append(token, self.eos_token_ids, self.executor.max_session_tokens)
        return request.finish_reason is not None

    def make_batch(self) -> list[BatchInput]:
        """Decode inputs for every prefilled request, then prefill chunks within the budget."""
        batch = [BatchInput(r.sid, (r.token_ids[-1],), r.num_computed)
                 for r in self.running if r.is_prefilled]
        budget, grid = self.max_prefill_tokens, self.max_prefill_tokens
        for request in self.running:
            if request.is_prefilled:
                continue
            start = request.num_computed
            end = min(len(request.prompt_token_ids), (start // grid + 1) * grid)
            if end - start > budget:
                continue  # waits: cutting it here would depend on the batch
            batch.append(BatchInput(request.sid, request.prompt_token_ids[start:end], start,
                                    produce_output=end == len(request.prompt_token_ids)))
            budget -= end - start
        assert batch, "a running request always has an input"
        return batch

    def abort(self) -> None:
        """Close every session still open and forget every request (after an error or a
        consumer that stopped early)."""
        running, self.running = self.running, []
        self.waiting.clear()
        for request in running:
            if request.sid is not None:
                self.executor.close_session(request.sid)
                request.sid = None

    def _admit(self) -> None:
        while self.waiting and self.executor.can_open_session():
            request = self.waiting[0]
            sid = self.executor.open_session()
            try:
                self.executor.set_sampling(sid, request.params.sampling, request.params.seed)
            except BaseException:
                self.executor.close_session(sid)
                raise
            request.sid = sid
            self.running.append(self.waiting.popleft())
        if not self.running:
            raise InvalidArgument(f"all {self.executor.max_sessions} sessions are in use (is "
                                  "another stream still open?)")

    def _report_prefill(self, num_tokens: int) -> None:
        if num_tokens == 0:
            return
        self.num_prefilled += num_tokens
        if self.on_prefill is not None:
            self.on_prefill(self.num_prefilled, self.num_prompt_tokens)

    def _retire(self, request: Request) -> None:
        self.running.remove(request)
        assert request.sid is not None
        self.executor.close_session(request.sid)
        request.sid = None
