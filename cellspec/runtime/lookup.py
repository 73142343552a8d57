"""Proposals looked up in a session's own tokens (prompt lookup): after a cycle's draft
proposals, the tokens that followed the latest earlier occurrence of the text's last few tokens.

A small model's answers repeat their prompt and themselves (lists, poems, code, a rewritten
paragraph); where the text's last `min_match` or more tokens occurred before, what followed them
then is a cheap guess at what follows now. The verify checks every proposal, so a guess can only
change how many tokens a cycle commits, never which (runtime/dflash.py, `lookup_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# the longest suffix compared: a longer match says little more about what follows
MAX_MATCH = 8
# the fewest tokens of the text's end that must have occurred before (lookup_match's default):
# on SmolLM2's held-out answers, of the tokens looked up after the draft's accepted proposals,
# 17-21% were accepted after a match of 4 or 5 tokens, 34-38% after 6 or 7 and 61% after 8; on
# the CPU a verify row of int4 weights costs about 0.13 of a step, so short matches cost more
# rows than they give back there (bench/NOTES.md, 2026-12-05)
LOOKUP_MATCH = 6


class TokenHistory:
    """The tokens at a session's positions 0..length-1 (what its cache holds), kept by the
    executor as it feeds, commits and rewinds them."""

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self._buffer = np.zeros(max(64, len(tokens)), np.int64)
        self.length = len(tokens)
        self._buffer[: self.length] = tokens

    def tokens(self) -> np.ndarray:
        """Positions 0..length-1 (a view: valid until the next write)."""
        return self._buffer[: self.length]

    def write(self, position: int, tokens: Sequence[int]) -> None:
        """Tokens at position.. (which must not leave a gap); whatever stood past them goes."""
        assert 0 <= position <= self.length, (position, self.length)
        end = position + len(tokens)
        if end > self._buffer.size:
            grown = np.zeros(max(end, 2 * self._buffer.size), np.int64)
            grown[: position] = self._buffer[: position]
            self._buffer = grown
        self._buffer[position:end] = tokens
        self.length = end

    def truncate(self, position: int) -> None:
        """Forget positions >= position."""
        self.length = min(self.length, position)

    def copy(self, upto: int) -> TokenHistory:
        """A history of this one's first `upto` positions."""
        return TokenHistory(self._buffer[: min(upto, self.length)])


def continuation(history: np.ndarray, tail: Sequence[int], min_match: int, count: int
                 ) -> list[int]:
    """Up to `count` tokens that followed the earlier occurrence of the last n tokens of
    history + tail that matches longest (n from min_match up to MAX_MATCH; the latest of equal
    length), or [] where none matches min_match tokens. What followed may run into the text's
    own end (a repeat of a repeat)."""
    if count <= 0:
        return []
    text = np.concatenate([history, np.asarray(tail, np.int64)])
    last = text.size - 1
    if last < min_match:
        return []
    # occurrences of the last token, each followed by at least one token
    ends = np.flatnonzero(text[:last] == text[last])
    if ends.size == 0:
        return []
    matched = np.ones(ends.size, np.int64)
    alive = np.ones(ends.size, bool)
    for back in range(1, MAX_MATCH):
        ok = alive & (ends >= back)
        ok[ok] = text[ends[ok] - back] == text[last - back]
        if not ok.any():
            break
        matched += ok
        alive = ok
    best = matched.max()
    if best < min_match:
        return []
    end = int(ends[np.flatnonzero(matched == best)[-1]])
    return text[end + 1: end + 1 + count].tolist()
