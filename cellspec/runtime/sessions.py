"""The session table: which sessions are open, their sampling, budget and health.

A session's frontier (next position) is the cell cache's `pos(sid)`; the table keeps what the
cache does not: sampling parameters, seed, and whether a failed step poisoned it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from cellspec.errors import InvalidArgument
from cellspec.runtime.types import Sampling


@dataclass
class SessionState:
    sampling: Sampling | None = None
    seed: int = 0
    is_poisoned: bool = False


class SessionTable:
    def __init__(self, max_sessions: int, max_session_tokens: int) -> None:
        self.max_sessions = max_sessions
        self.max_session_tokens = max_session_tokens
        self.states: dict[int, SessionState] = {}
        self._next_sid = 0

    def __contains__(self, sid: int) -> bool:
        return sid in self.states

    def __len__(self) -> int:
        return len(self.states)

    def can_open(self) -> bool:
        return len(self.states) < self.max_sessions

    def check_can_open(self) -> None:
        if not self.can_open():
            raise InvalidArgument(f"all {self.max_sessions} sessions are open; close one first")

    def open(self, state: SessionState | None = None) -> int:
        self.check_can_open()
        sid = self._next_sid
        self._next_sid += 1
        self.states[sid] = state or SessionState()
        return sid

    def close(self, sid: int) -> None:
        self.get(sid, allow_poisoned=True)
        del self.states[sid]

    def get(self, sid: int, allow_poisoned: bool = False) -> SessionState:
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise InvalidArgument(f"session id {sid!r}: expected an int")
        state = self.states.get(sid)
        if state is None:
            raise InvalidArgument(f"session {sid}: not open (unknown or closed)")
        if state.is_poisoned and not allow_poisoned:
            raise InvalidArgument(f"session {sid}: poisoned by a failed step; close it")
        return state

    def set_sampling(self, sid: int, sampling: Sampling, seed: int | None) -> None:
        if not isinstance(sampling, Sampling):
            raise InvalidArgument(f"sampling {sampling!r}: expected a cellspec Sampling")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise InvalidArgument(f"seed {seed!r}: expected an int >= 0 or None")
        state = self.get(sid)
        state.sampling = sampling
        state.seed = secrets.randbits(63) if seed is None else seed

    def clone_state(self, sid: int) -> SessionState:
        state = self.get(sid)
        return SessionState(state.sampling, state.seed)
