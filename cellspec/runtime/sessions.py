"""Sessions: one object per session holding everything about it but its cells.

A session's frontier (next position) is the cell cache's `pos(sid)`; the `Session` keeps the
rest: sampling parameters, seed, whether a failed step poisoned it, and, under speculation, its
draft state (the pending token, and the session's text where cycles look proposals up in it).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from cellspec.errors import InvalidArgument
from cellspec.runtime.lookup import TokenHistory
from cellspec.runtime.types import Sampling

MAX_SEED = 2**64 - 1  # uniforms mix the seed as a 64-bit word: larger seeds would alias


@dataclass
class DraftState:
    """DFlash per-session state (the draft cache holds positions 0..d-1; the taps of positions
    d..frontier-1 wait in the target's taps pool, in their cells)."""

    history: TokenHistory | None = None  # the tokens in the target cache (lookup_tokens)
    pending: int | None = None  # emitted, not yet fed to the target: the next anchor


@dataclass
class Session:
    sid: int
    sampling: Sampling | None = None
    seed: int = 0
    is_poisoned: bool = False
    draft: DraftState | None = None  # present under speculation

    def fork(self, sid: int) -> Session:
        """A new session with this one's sampling and seed (clone); its draft state is set
        by the speculating executor."""
        return Session(sid, self.sampling, self.seed)


class SessionTable:
    def __init__(self, max_sessions: int, max_session_tokens: int) -> None:
        self.max_sessions = max_sessions
        self.max_session_tokens = max_session_tokens
        self.sessions: dict[int, Session] = {}
        self._next_sid = 0

    def __contains__(self, sid: int) -> bool:
        return sid in self.sessions

    def __len__(self) -> int:
        return len(self.sessions)

    def can_open(self) -> bool:
        return len(self.sessions) < self.max_sessions

    def check_can_open(self) -> None:
        if not self.can_open():
            raise InvalidArgument(f"all {self.max_sessions} sessions are open; close one first")

    def open(self, template: Session | None = None) -> Session:
        """A new session (a fork of `template` when given)."""
        self.check_can_open()
        sid = self._next_sid
        self._next_sid += 1
        session = template.fork(sid) if template else Session(sid)
        self.sessions[sid] = session
        return session

    def close(self, sid: int) -> Session:
        session = self.get(sid, allow_poisoned=True)
        del self.sessions[sid]
        return session

    def get(self, sid: int, allow_poisoned: bool = False) -> Session:
        session = self.sessions.get(sid) if type(sid) is int else None
        if session is not None and not session.is_poisoned:  # the usual case: one lookup
            return session
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise InvalidArgument(f"session id {sid!r}: expected an int")
        session = self.sessions.get(sid)
        if session is None:
            raise InvalidArgument(f"session {sid}: not open (unknown or closed)")
        if session.is_poisoned and not allow_poisoned:
            raise InvalidArgument(f"session {sid}: poisoned by a failed step; close it")
        return session

    def set_sampling(self, sid: int, sampling: Sampling, seed: int | None) -> None:
        if not isinstance(sampling, Sampling):
            raise InvalidArgument(f"sampling {sampling!r}: expected a cellspec Sampling")
        if seed is not None and (isinstance(seed, bool)
                                 or not isinstance(seed, (int, np.integer))
                                 or not 0 <= seed <= MAX_SEED):
            raise InvalidArgument(f"seed {seed!r}: expected None or an integer in [0, 2**64)")
        session = self.get(sid)
        session.sampling = sampling
        session.seed = secrets.randbits(63) if seed is None else int(seed)
