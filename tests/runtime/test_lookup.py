"""Proposals looked up in a session's own text (runtime/lookup.py, DFlashExecutor's
lookup_tokens): the lookup against a brute-force search, the history against a list, and
speculation with looked-up proposals against plain decoding."""

import numpy as np
import pytest

from cellspec.errors import InvalidArgument
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.lookup import MAX_MATCH, TokenHistory, continuation
from cellspec.runtime.types import BatchInput

from .test_dflash import SAMPLINGS, plain_executor
from .test_dflash_oracle import spec_decode
from .test_executor import run_alone


def brute_force(text, min_match, count):
    """For n from MAX_MATCH down to min_match: the tokens after the latest earlier start s with
    text[s:s+n] == text[-n:] (at least one token after it)."""
    for n in range(MAX_MATCH, min_match - 1, -1):
        if len(text) < n + 1:
            continue
        for s in range(len(text) - n - 1, -1, -1):
            if text[s:s + n] == text[-n:]:
                return text[s + n: s + n + count]
    return []


@pytest.mark.parametrize("vocab", [2, 3, 6])
def test_continuation_is_the_longest_latest_match(vocab):
    rng = np.random.default_rng(vocab)
    found = 0
    for _ in range(400):
        text = rng.integers(0, vocab, int(rng.integers(0, 40))).tolist()
        cut = int(rng.integers(0, len(text) + 1))
        min_match, count = int(rng.integers(1, MAX_MATCH + 1)), int(rng.integers(0, 10))
        got = continuation(np.asarray(text[:cut], np.int64), text[cut:], min_match, count)
        assert got == brute_force(text, min_match, count), (text, cut, min_match, count)
        found += bool(got)
    assert found > 50  # the small vocabularies repeat: most cases find something


def test_continuation_examples():
    history = np.asarray([5, 1, 2, 3, 4, 9, 8, 1, 2, 3, 4, 7, 6], np.int64)
    # "1 2 3 4" occurred twice: the latest occurrence's continuation, running into the tail
    assert continuation(history[:11], [], 4, 3) == [9, 8, 1]
    assert continuation(history, [1, 2, 3, 4], 4, 3) == [7, 6, 1]
    # the longest match wins over a later shorter one: "9 1 2" after "x 9 1 2 y", later "1 2 z"
    assert continuation(np.asarray([9, 1, 2, 5, 1, 2, 6, 9, 1], np.int64), [2], 2, 1) == [5]
    assert continuation(np.asarray([1, 2, 3], np.int64), [4], 1, 5) == []  # 4 never occurred
    assert continuation(np.asarray([1, 2, 1, 2], np.int64), [], 3, 5) == []  # too short a match
    assert continuation(np.asarray([1, 2, 1, 2], np.int64), [], 2, 0) == []
    assert continuation(np.asarray([], np.int64), [7], 1, 4) == []


def test_token_history_follows_writes_truncations_and_copies():
    rng = np.random.default_rng(3)
    history, model = TokenHistory(), []
    copies = []
    for _ in range(300):
        op = rng.choice(["write", "truncate", "copy"], p=[0.6, 0.3, 0.1])
        if op == "write":
            position = int(rng.integers(0, len(model) + 1))
            tokens = rng.integers(0, 1000, int(rng.integers(0, 90))).tolist()
            history.write(position, tokens)
            model = model[:position] + tokens
        elif op == "truncate":
            position = int(rng.integers(0, len(model) + 3))
            history.truncate(position)
            model = model[:position]
        else:
            upto = int(rng.integers(0, len(model) + 3))
            copies.append((history.copy(upto), model[:upto]))
        assert history.length == len(model) and history.tokens().tolist() == model
    for copy, expected in copies:  # later writes to the original do not reach a copy
        assert copy.tokens().tolist() == expected


def repeating_prompts(count, seed):
    """Prompts that repeat a phrase, so that the text has something to look up."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        phrase = rng.integers(3, 250, int(rng.integers(3, 7))).tolist()
        out.append((phrase * 4)[: int(rng.integers(14, 24))])
    return out


class Known:
    """Proposes each session's known text after its anchor (plain decoding's, computed before),
    with an error at a random place in most cycles, so that every acceptance length happens
    and the looked-up tokens after the proposals are reached often."""

    def __init__(self, texts, rng):
        self.texts, self.rng = texts, rng

    def propose(self, requests, n_draft):
        rows = []
        for r in requests:
            text = self.texts[r.sid]
            row = (text[r.position + 1: r.position + 1 + n_draft] + [3] * n_draft)[:n_draft]
            error = int(self.rng.integers(0, 2 * n_draft))
            if error < n_draft:
                row[error] = (row[error] + 1) % 250
            rows.append(row)
        return np.asarray(rows, dtype=np.int64)


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
@pytest.mark.parametrize("count", [1, 3])
def test_looked_up_proposals_keep_the_text(dflash_artifact, name, count):
    texts, known = repeating_prompts(count, seed=5), {}
    proposer = Known(known, np.random.default_rng(count))
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=4, n_draft=2, lookup_tokens=5,
                               lookup_match=1, proposer=proposer)
    assert spec.chain_limit == 7 and spec.cycle_rows == 8
    sampling = SAMPLINGS[name]
    plain = [run_alone(plain_executor(spec), p, sampling, seed=40 + i, steps=70)
             for i, p in enumerate(texts)]
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed=40 + i)
        known[sid] = texts[i] + plain[i]
    assert spec_decode(spec, sids, texts, 60) == [p[:60] for p in plain]
    for sid in sids:  # the history is what the cache holds
        history = spec.sessions.sessions[sid].draft.history
        assert history.tokens().tolist() == known[sid][: spec.pos(sid)]
    stats = spec.stats
    # tokens are looked up (the chains are longer than the 2 proposals); the tiny model's
    # greedy text repeats itself, so some of them are accepted (its sampled text hardly does)
    assert stats.looked_up > 0 and stats.proposed > stats.cycles * 2
    assert stats.looked_up_accepted <= stats.looked_up
    if name == "greedy":
        assert stats.looked_up_accepted > 0


def test_lookup_off_proposes_the_drafts_alone(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=1, n_draft=2)
    assert spec.lookup_tokens == 0 and spec.chain_limit == 2
    sid = spec.open_session()
    spec.set_sampling(sid, SAMPLINGS["greedy"])
    spec_decode(spec, [sid], repeating_prompts(1, seed=5), 20)
    assert spec.stats.looked_up == 0 and spec.stats.proposed == 2 * spec.stats.cycles
    assert spec.sessions.sessions[sid].draft.history is None


def test_the_chain_stays_within_the_widest_step(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=1, n_draft=4, lookup_tokens=100)
    assert spec.chain_limit == spec.target.max_width - 1


@pytest.mark.parametrize("kwargs", [
    dict(lookup_tokens=-1), dict(lookup_tokens=2.0), dict(lookup_tokens=True),
    dict(lookup_tokens="8"), dict(lookup_tokens=None), dict(lookup_match=0),
    dict(lookup_match=MAX_MATCH + 1), dict(lookup_match=2.5), dict(lookup_match=False)])
def test_bad_lookup_options_are_refused(dflash_artifact, kwargs):
    with pytest.raises(InvalidArgument, match="lookup_"):
        DFlashExecutor.load(dflash_artifact, max_sessions=1, **kwargs)


def test_a_refused_batch_leaves_the_history_as_it_was(dflash_artifact):
    spec = DFlashExecutor.load(dflash_artifact, max_sessions=2, n_draft=2, lookup_tokens=4)
    sid = spec.open_session()
    spec.set_sampling(sid, SAMPLINGS["greedy"])
    spec.execute([BatchInput(sid, (5, 6, 7), 0)])
    before = spec.sessions.sessions[sid].draft.history.tokens().tolist()
    with pytest.raises(InvalidArgument):
        spec.execute([BatchInput(sid, (8,), 3), BatchInput(sid, (9,), 4)])  # twice in a batch
    with pytest.raises(InvalidArgument):
        spec.execute([BatchInput(sid, (10**9,), 3)])  # not a token
    assert spec.sessions.sessions[sid].draft.history.tokens().tolist() == before == [5, 6, 7]
    assert spec.pos(sid) == 3
