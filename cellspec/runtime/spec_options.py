"""A DFlash executor's options, each validated where the caller gives it (pure; no engine):
draft_threshold, max_verify_rows, speculate_sampled, lookup_tokens and lookup_match,
tree_choices, and the cut a threshold makes (`confident_length`). runtime/dflash.py says what
each does."""

from __future__ import annotations

import numpy as np

from cellspec import artifact as names
from cellspec.errors import InvalidArgument
from cellspec.manifest_fields import is_int, is_number
from cellspec.runtime.lookup import MAX_MATCH


def check_draft_threshold(threshold: float | None) -> float | None:
    """None, or a real number in [0, 1) as a float (0: every cycle proposes n_draft)."""
    if threshold is None:
        return None
    if not (is_number(threshold) and 0.0 <= threshold < 1.0):
        raise InvalidArgument(f"draft_threshold {threshold!r}: expected a number in [0, 1) "
                              "(0: no cut) or None")
    return None if float(threshold) == 0.0 else float(threshold)


def check_speculate_sampled(value: bool | int) -> bool | int:
    """True, False, or an int n >= 1 (sampled sessions speculate when at most n sessions of a
    step could); a float or string is refused: it says nothing it means."""
    if not (isinstance(value, bool) or (is_int(value) and value >= 1)):
        raise InvalidArgument(f"speculate_sampled {value!r}: expected True, False or an int "
                              ">= 1 (sampled sessions speculate when at most that many could)")
    return value if isinstance(value, bool) else int(value)


def check_max_verify_rows(rows: int | None) -> int | None:
    """None, or an int >= 2 (a verify row for the anchor, one for a proposal) as an int."""
    if rows is not None and not (is_int(rows) and rows >= 2):
        raise InvalidArgument(f"max_verify_rows {rows!r}: expected an int >= 2 or None (no "
                              "limit)")
    return None if rows is None else int(rows)


def check_lookup(tokens: int, match: int) -> tuple[int, int]:
    """lookup_tokens: an int >= 0 (0: none looked up); lookup_match: an int in [1, MAX_MATCH]
    (the fewest tokens of the text's end that must have occurred before)."""
    if not (is_int(tokens) and tokens >= 0):
        raise InvalidArgument(f"lookup_tokens {tokens!r}: expected an int >= 0 (0: no "
                              "proposals looked up in the text)")
    if not (is_int(match) and 1 <= match <= MAX_MATCH):
        raise InvalidArgument(f"lookup_match {match!r}: expected an int in [1, {MAX_MATCH}]")
    return int(tokens), int(match)


def check_tree_choices(choices: int | None) -> int | None:
    """None (all TOP_K choices of a row), or an int in [1, TOP_K]; a bool is refused."""
    if choices is not None and (isinstance(choices, bool) or not isinstance(choices, int)
                                or not 1 <= choices <= names.TOP_K):
        raise InvalidArgument(f"tree_choices {choices!r}: expected an int in "
                              f"[1, {names.TOP_K}] or None (all {names.TOP_K})")
    return choices


def confident_length(probs: np.ndarray, threshold: float) -> int:
    """How many proposals a cycle verifies: for each owner (a row of probs [O, n], the draft's
    probability of each proposal), the leading proposals whose running product stays >=
    threshold, at least 1; the most of any owner, so that every owner's verify is equally wide."""
    confident = np.cumprod(probs, axis=1) >= threshold
    # the running product only falls, so the confident rows are a prefix
    return max(1, int(confident.sum(axis=1).max()))
