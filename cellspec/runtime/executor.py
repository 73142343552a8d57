"""The batching executor (the CudaExecutor port): sessions over one cell cache, packed steps.

`execute(batch)` validates the whole batch before anything changes, packs every input's tokens
into one step, runs it piece by piece, and samples one token per input that asked for output.
A rejected batch leaves every session exactly as it was; a failure after mutation poisons the
sessions the batch touched (close them; the error names them).

Subclasses (the DFlash executor) keep state of their own per session in `Session.draft` and
follow the session operations through the `_opened`, `_closed`, `_cloned` and `_rewound` hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cellspec.artifact import Manifest
from cellspec.errors import ExecutionFailed, InvalidArgument
from cellspec.runtime.backend import Backend, check_backend, load_backend
from cellspec.runtime.cell_cache import CellCache
from cellspec.runtime.draws import Draws, greedy_draws, make_draws
from cellspec.runtime.sampling import positional_uniform
from cellspec.runtime.sessions import Session, SessionTable
from cellspec.runtime.target import ForwardResult, TargetModel
from cellspec.runtime.types import BatchInput, Output, Sampling


@dataclass(frozen=True)
class PackedStep:
    batch: tuple[BatchInput, ...]  # the validated inputs, plain ints throughout
    seq_ids: np.ndarray  # [T]
    tokens: np.ndarray  # [T]
    positions: np.ndarray  # [T]
    logit_indices: np.ndarray  # [R], the last token of each input that asked for output
    output_inputs: tuple[int, ...]  # [R], which batch input each logits row answers


class Executor:
    def __init__(self, folder: Path, manifest: Manifest, backend: Backend, target: TargetModel,
                 max_sessions: int, max_session_tokens: int) -> None:
        self.folder = folder
        self.manifest = manifest
        self.backend = backend
        self.target = target
        self.sessions = SessionTable(max_sessions, max_session_tokens)

    @classmethod
    def load(cls, artifact: str | Path, backend: str | Backend = "ort-cpu", max_sessions: int = 8,
             max_session_tokens: int = 0, threads: int | None = None) -> Executor:
        """Load an artifact; 0 tokens = the largest budget every session can fill at once."""
        return cls(*load_parts(artifact, backend, max_sessions, max_session_tokens, threads,
                               lone_engine=True))

    # -- sessions --------------------------------------------------------------------------

    @property
    def cache(self) -> CellCache:
        return self.target.cache

    @property
    def vocab_size(self) -> int:
        return self.manifest.model.vocab_size

    @property
    def max_session_tokens(self) -> int:
        return self.sessions.max_session_tokens

    @property
    def max_sessions(self) -> int:
        return self.sessions.max_sessions

    def can_open_session(self) -> bool:
        return self.sessions.can_open()

    def open_session(self) -> int:
        session = self.sessions.open()
        self.cache.seq_new(session.sid)
        self._opened(session)
        return session.sid

    def close_session(self, sid: int) -> None:
        self.sessions.close(sid)
        self.cache.seq_rm(sid)
        self._closed(sid)

    def clone(self, sid: int, upto: int) -> int:
        """A new session seeing `sid`'s first `upto` positions (shared cells), same sampling."""
        source = self.sessions.get(sid)
        upto = _check_int("upto", upto)
        if not 0 <= upto <= self.cache.pos(sid):
            raise InvalidArgument(f"session {sid}: clone position {upto} outside "
                                  f"0..{self.cache.pos(sid)}")
        session = self.sessions.open(source)
        self.cache.seq_clone(sid, session.sid, upto)
        self._cloned(source, session, upto)
        return session.sid

    def rewind(self, sid: int, pos: int) -> None:
        """Forget positions >= pos of `sid`."""
        self.sessions.get(sid)
        pos = _check_int("position", pos)
        self.cache.rewind(sid, pos)
        self._rewound(sid, pos)

    def pos(self, sid: int) -> int:
        self.sessions.get(sid, allow_poisoned=True)
        return self.cache.pos(sid)

    def set_sampling(self, sid: int, sampling: Sampling, seed: int | None = None) -> None:
        self.sessions.set_sampling(sid, sampling, seed)

    # hooks for executors that keep more per session; each runs after the cache changed
    def _opened(self, session: Session) -> None:
        pass

    def _closed(self, sid: int) -> None:
        pass

    def _cloned(self, source: Session, clone: Session, upto: int) -> None:
        pass

    def _rewound(self, sid: int, pos: int) -> None:
        pass

    # -- steps -----------------------------------------------------------------------------

    def execute(self, batch: Sequence[BatchInput]) -> list[Output | None]:
        """Run one batch; outputs align with inputs (None where no output was asked)."""
        step = self.pack(batch)
        try:
            return self.make_outputs(step, self.run_packed(step))
        except Exception as error:  # the cache changed: whatever failed, the batch is poisoned
            raise self.poison([b.sid for b in step.batch], error) from error

    def decode(self, batch: Sequence[BatchInput], steps: int,
               on_step: Callable[[list[int]], bool] | None = None) -> list[Output]:
        """Up to `steps` decode steps: every input (one token at its session's frontier, asking
        for output) is fed, then each session the token it drew, as that many `execute` calls
        would; returns each input's drawn tokens (as many for every input). Where the backend
        runs ahead (`ort-cuda`), the host plans each step while the device runs the one before.
        `on_step(tokens)`: called with every step's tokens (in input order) as they are known;
        when it returns True no further step starts (where the backend runs ahead, the one
        already running still finishes and is returned). Everything is checked before anything
        runs."""
        steps = _check_int("steps", steps)
        if steps < 1:
            raise InvalidArgument(f"steps {steps}: expected >= 1")
        if on_step is not None and not callable(on_step):
            raise InvalidArgument(f"on_step {on_step!r}: expected a callable or None")
        step = self.pack(batch)
        for item in step.batch:
            if len(item.tokens) != 1 or not item.produce_output:
                raise InvalidArgument(f"session {item.sid}: decode takes one token asking for "
                                      "output per session")
            if item.position != self.cache.pos(item.sid):
                raise InvalidArgument(f"session {item.sid}: decode starts at the frontier "
                                      f"{self.cache.pos(item.sid)}, not {item.position}")
            if item.position + steps > self.max_session_tokens:
                raise InvalidArgument(f"session {item.sid}: {steps} steps from position "
                                      f"{item.position} exceed the budget of "
                                      f"{self.max_session_tokens} tokens")
        sids = [item.sid for item in step.batch]
        try:
            draws = [self.draws(sids, (step.positions + k + 1).tolist()) for k in range(steps)]
            tokens = self.target.decode_chain(step.seq_ids, step.tokens, draws, on_step)
        except Exception as error:  # the cache changed: whatever failed, the batch is poisoned
            raise self.poison(sids, error) from error
        return [Output(sid, tuple(column)) for sid, column in zip(sids, tokens.T.tolist())]

    def chains_run_ahead(self, batch: Sequence[BatchInput]) -> bool:
        """Whether `decode` of this batch would plan ahead of the device (a caller's cue to
        chain decode steps); the batch is not checked."""
        return self.backend.runs_ahead

    def make_outputs(self, step: PackedStep, result: ForwardResult) -> list[Output | None]:
        """One drawn token per input that asked for output; None for the other inputs."""
        outputs: list[Output | None] = [None] * len(step.batch)
        for row, index in enumerate(step.output_inputs):
            outputs[index] = Output(step.batch[index].sid, (int(result.tokens[row]),))
        return outputs

    def draws(self, sids: list[int], positions: list[int]) -> Draws:
        """How to draw each row: session sids[r]'s sampling, the uniform of positions[r] (the
        position the drawn token will occupy)."""
        # (a verify asks for each session's rows together: each session looked up once)
        known = {sid: self.sessions.get(sid) for sid in dict.fromkeys(sids)}
        if all(s.sampling is not None and s.sampling.is_greedy for s in known.values()):
            return greedy_draws(len(sids))  # (shared: every row argmax, no uniform)
        rows = []
        for sid, position in zip(sids, positions):
            session = known[sid]
            s = session.sampling
            assert s is not None
            uniform = 0.0 if s.is_greedy else positional_uniform(session.seed, position)
            rows.append((s.temperature, s.top_p, s.top_k, uniform))
        return make_draws(rows)

    def pack(self, batch: Sequence[BatchInput]) -> PackedStep:
        """Validate the whole batch (nothing changes) and pack it into one step."""
        return self.pack_checked(self.validate(batch))

    def pack_checked(self, batch: tuple[BatchInput, ...]) -> PackedStep:
        """Pack inputs `validate` returned (and nothing changed since) into one step."""
        seq_ids, tokens, positions, indices, answered = [], [], [], [], []
        for index, item in enumerate(batch):
            n = len(item.tokens)
            seq_ids += [item.sid] * n
            tokens += item.tokens
            positions += range(item.position, item.position + n)
            if item.produce_output:
                indices.append(len(tokens) - 1)
                answered.append(index)
        return PackedStep(batch, _int64(seq_ids), _int64(tokens), _int64(positions),
                          _int64(indices), tuple(answered))

    def validate(self, batch: Sequence[BatchInput]) -> tuple[BatchInput, ...]:
        """Check every input; returns them with numpy integers made plain ints."""
        if not isinstance(batch, Sequence) or len(batch) == 0:
            raise InvalidArgument("batch: expected a non-empty sequence of BatchInput")
        seen: set[int] = set()
        checked = []
        for item in batch:
            if not isinstance(item, BatchInput):
                raise InvalidArgument(f"batch item {item!r}: expected a BatchInput")
            session = self.sessions.get(item.sid)
            if item.sid in seen:
                raise InvalidArgument(f"session {item.sid}: two inputs in one batch")
            seen.add(item.sid)
            tokens = self._check_tokens(item)
            position = _check_int("position", item.position)
            produce_output = _check_bool("produce_output", item.produce_output)
            if (tokens is not item.tokens or position is not item.position
                    or produce_output is not item.produce_output):  # numpy values made plain
                item = BatchInput(item.sid, tokens, position, produce_output)
            self._check_span(item)
            if item.produce_output and session.sampling is None:
                raise InvalidArgument(f"session {item.sid}: output requested with no sampling "
                                      "set (call set_sampling first)")
            checked.append(item)
        return tuple(checked)

    def run_packed(self, step: PackedStep) -> ForwardResult:
        """Mutate: rewind inputs that start before their frontier, then run the step. A failure
        leaves the batch's sessions half-done: the caller poisons them."""
        for item in step.batch:
            if item.position < self.cache.pos(item.sid):
                self.cache.rewind(item.sid, item.position)
                self._rewound(item.sid, item.position)
        positions = step.positions[step.logit_indices] + 1
        sids = [step.batch[index].sid for index in step.output_inputs]
        draws = self.draws(sids, positions.tolist())
        return self.target.forward(step.seq_ids, step.tokens, step.logit_indices, draws)

    def poison(self, sids: list[int], error: Exception) -> ExecutionFailed:
        """Mark `sids` unusable after `error` struck mid-mutation; the error to raise."""
        sids = sorted(set(sids))
        for sid in sids:
            if sid in self.sessions:
                self.sessions.sessions[sid].is_poisoned = True
        return ExecutionFailed(f"{type(error).__name__}: {error}; sessions {sids} are poisoned "
                               "and must be closed", tuple(sids))

    def _check_tokens(self, item: BatchInput) -> tuple[int, ...]:
        """The tokens as a tuple of plain ints (`item.tokens` itself when it is one)."""
        tokens = item.tokens
        if not isinstance(tokens, (tuple, list)) or len(tokens) == 0:
            raise InvalidArgument(f"session {item.sid}: tokens must be a non-empty list")
        if (type(tokens) is tuple and all(type(t) is int for t in tokens)
                and 0 <= min(tokens) and max(tokens) < self.vocab_size):
            return tokens  # the common case, checked in three passes of C loops
        for token in tokens:
            if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
                raise InvalidArgument(f"session {item.sid}: token {token!r} is not an int")
            if not 0 <= token < self.vocab_size:
                raise InvalidArgument(f"session {item.sid}: token {token} outside the "
                                      f"vocabulary 0..{self.vocab_size - 1}")
        return tuple(int(t) for t in tokens)

    def _check_span(self, item: BatchInput) -> None:
        frontier = self.cache.pos(item.sid)
        if item.position < 0:
            raise InvalidArgument(f"session {item.sid}: negative position {item.position}")
        if item.position > frontier:
            raise InvalidArgument(f"session {item.sid}: position {item.position} is past "
                                  f"its frontier {frontier}")
        end = item.position + len(item.tokens)
        if end > self.max_session_tokens:
            raise InvalidArgument(f"session {item.sid}: tokens up to position {end} exceed "
                                  f"the budget of {self.max_session_tokens} tokens")


def load_parts(artifact: str | Path, backend: str | Backend, max_sessions: int,
               max_session_tokens: int, threads: int | None, lone_engine: bool = False
               ) -> tuple:
    """What an executor is made of, each checked: (folder, manifest, backend, target,
    max_sessions, per-session token budget). `backend` is a name, or (tests) a Backend.
    lone_engine: the target is the only engine the executor runs (see load_backend)."""
    folder = Path(artifact)
    manifest = Manifest.load(folder)
    if isinstance(backend, str):
        check_backend(backend, manifest.model.dtype, threads)
    budget = check_limits(manifest, max_sessions, max_session_tokens)
    if isinstance(backend, str):
        backend = load_backend(backend, folder, manifest, threads, max_sessions, lone_engine)
    target = TargetModel(folder, manifest, backend)
    return folder, manifest, backend, target, max_sessions, budget


def check_limits(manifest: Manifest, max_sessions: int, max_session_tokens: int) -> int:
    """Validate the session limits against the pool; returns the per-session token budget."""
    max_sessions = _check_int("max_sessions", max_sessions)
    max_session_tokens = _check_int("max_session_tokens", max_session_tokens)
    if max_sessions <= 0:
        raise InvalidArgument(f"max_sessions {max_sessions}: expected > 0")
    if max_session_tokens < 0:
        raise InvalidArgument(f"max_session_tokens {max_session_tokens}: expected >= 0")
    if max_session_tokens > manifest.max_context:
        raise InvalidArgument(f"max_session_tokens {max_session_tokens} exceeds the model's "
                              f"context of {manifest.max_context}")
    usable = manifest.max_cells - 1  # one cell is the scratch row
    if max_session_tokens == 0:
        max_session_tokens = min(manifest.max_context, usable // max_sessions)
        if max_session_tokens == 0:
            raise InvalidArgument(f"{max_sessions} sessions leave no cell budget in a pool of "
                                  f"{manifest.max_cells} cells")
    if max_sessions * max_session_tokens > usable:
        raise InvalidArgument(f"{max_sessions} sessions of {max_session_tokens} tokens exceed "
                              f"the pool's {manifest.max_cells} cells, one of which is reserved")
    return max_session_tokens


def _int64(values: list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _check_int(name: str, value: object) -> int:
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgument(f"{name} {value!r}: expected an int")
    return int(value)


def _check_bool(name: str, value: object) -> bool:
    if type(value) is bool:
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgument(f"{name} {value!r}: expected a bool")
    return bool(value)
