"""The speculate-verify cycle driven by an oracle proposer: the target's own continuation with
errors injected at chosen offsets. Every outcome (bonus, partial, immediate rejection) happens,
and the text always equals plain decoding's."""

import numpy as np
import pytest

from cellspec.errors import InvalidArgument
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.types import BatchInput, Sampling

from .test_executor import prompts, run_alone

N_DRAFT = 4
STEPS = 30
SAMPLINGS = {"greedy": Sampling(), "sampled": Sampling(temperature=0.7, top_p=0.9)}


class Oracle:
    """Proposes truth[sid][p+1 : p+1+n] for an anchor at p, corrupting one offset per cycle
    from `schedule` (None = no error: full acceptance and a bonus token)."""

    def __init__(self, truth: dict[int, list[int]], schedule: list[int | None]):
        self.truth, self.schedule, self.cycles = truth, schedule, 0
        self.expected_accepts: list[int] = []

    def propose(self, requests, n_draft):
        rows = []
        for request in requests:
            true = self.truth[request.sid][request.position + 1: request.position + 1 + n_draft]
            row = list(true) + [0] * (n_draft - len(true))
            error = self.schedule[self.cycles % len(self.schedule)]
            self.cycles += 1
            if error is not None:
                row[error] = (row[error] + 1) % 256
            self.expected_accepts.append(n_draft if error is None else error)
            rows.append(row)
        return np.asarray(rows, dtype=np.int64)


def speculating(executor, proposer, n_draft=N_DRAFT):
    """A DFlash executor over the same artifact and limits, proposing with `proposer`."""
    return DFlashExecutor.load(executor.folder, max_sessions=executor.max_sessions,
                               max_session_tokens=executor.max_session_tokens,
                               proposer=proposer, n_draft=n_draft)


def spec_decode(spec, sids, prompt_list, steps):
    """Prefill every session, then decode pending tokens until each has `steps` new tokens."""
    outs = spec.execute([BatchInput(s, tuple(p), 0) for s, p in zip(sids, prompt_list)])
    produced = {o.sid: list(o.tokens) for o in outs}
    while any(len(produced[s]) < steps for s in sids):
        live = [s for s in sids if len(produced[s]) < steps]
        batch = [BatchInput(s, (produced[s][-1],), spec.pos(s)) for s in live]
        for out in spec.execute(batch):
            produced[out.sid].extend(out.tokens)
        spec.cache.check()
    return [produced[s][:steps] for s in sids]


def truth_by_position(prompt, continuation):
    return list(prompt) + list(continuation)


@pytest.mark.parametrize("name", sorted(SAMPLINGS))
@pytest.mark.parametrize("count", [1, 6])
def test_oracle_speculation_equals_plain_decoding(make_executor, name, count):
    executor = make_executor()
    sampling = SAMPLINGS[name]
    texts = prompts(count, seed=11)
    plain = [run_alone(executor, p, sampling, seed=40 + i, steps=STEPS + N_DRAFT + 2)
             for i, p in enumerate(texts)]
    oracle = Oracle({}, [None, 0, 2, None, 1, 3])
    spec = speculating(executor, oracle)
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed=40 + i)
        oracle.truth[sid] = truth_by_position(texts[i], plain[i])
    produced = spec_decode(spec, sids, texts, STEPS)
    assert produced == [p[:STEPS] for p in plain]
    stats = spec.stats
    assert stats.cycles == len(oracle.expected_accepts)
    assert stats.accepted == sum(oracle.expected_accepts)
    assert stats.bonus == oracle.expected_accepts.count(N_DRAFT) > 0
    assert 0 in oracle.expected_accepts and 2 in oracle.expected_accepts
    assert stats.tau == pytest.approx(1 + stats.accepted / stats.cycles)
    for sid in sids:
        spec.close_session(sid)
    assert spec.cache.num_used == 0


def test_clone_and_rewind_in_the_middle(make_executor):
    executor = make_executor()
    sampling = SAMPLINGS["sampled"]
    prompt = prompts(1, seed=21)[0]
    plain = run_alone(executor, prompt, sampling, seed=5, steps=40)
    oracle = Oracle({}, [None, 1])
    spec = speculating(executor, oracle)
    sid = spec.open_session()
    spec.set_sampling(sid, sampling, seed=5)
    oracle.truth[sid] = truth_by_position(prompt, plain)
    produced = spec_decode(spec, [sid], [prompt], 12)[0]
    # a clone from the middle of the generated text continues exactly as plain decoding
    upto = len(prompt) + 6
    branch = spec.clone(sid, upto)
    oracle.truth[branch] = oracle.truth[sid]
    out = spec.execute([BatchInput(branch, (plain[6],), upto)])[0]
    branch_tokens = list(out.tokens)
    while len(branch_tokens) < 20:
        out = spec.execute([BatchInput(branch, (branch_tokens[-1],), spec.pos(branch))])[0]
        branch_tokens.extend(out.tokens)
    assert branch_tokens[:20] == plain[7:27]
    # rewind the original, re-decode: the same tokens again
    spec.rewind(sid, len(prompt) + 3)
    again = [plain[3]]
    while len(again) < 15:
        out = spec.execute([BatchInput(sid, (again[-1],), spec.pos(sid))])[0]
        again.extend(out.tokens)
    assert again[:15] == plain[3:18]
    assert produced == plain[:12]
    spec.close_session(sid)
    spec.close_session(branch)
    spec.cache.check()
    assert spec.cache.num_used == 0


def test_n_draft_out_of_range_is_refused(make_executor):
    executor = make_executor()
    for bad in (1, 8, 0, 2.5, True):
        with pytest.raises(InvalidArgument, match="n_draft"):
            speculating(executor, Oracle({}, [None]), n_draft=bad)
