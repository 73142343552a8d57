"""LLM on a tiny random Llama: continuous batching equals running alone, stops, streaming,
budgets, validation, and no session or cell left behind."""

import json
import shutil

import pytest

from cellspec.errors import ExecutionFailed, InvalidArgument
from cellspec.llm import LLM, SamplingParams
from tests.tiny_chat import tiny_chat_artifact

MAX_SESSIONS, MAX_PREFILL = 3, 16
PROMPTS = [
    "hi",
    "hello world, what is the capital of France?",
    "the quick brown fox jumps over the lazy dog " * 3,
    "naïve café 日本語",
    "Paris " * 12,
    "emoji 🙂🚀 über straße",
    "x",
]


@pytest.fixture(scope="session")
def artifact(tmp_path_factory):
    return tiny_chat_artifact(tmp_path_factory)


@pytest.fixture(scope="module")
def llm(artifact):
    return LLM(artifact, max_sessions=MAX_SESSIONS, max_prefill_tokens=MAX_PREFILL)


@pytest.fixture
def batches(llm, monkeypatch):
    """Every batch the executor runs during the test, as lists of BatchInput."""
    recorded = []
    execute = llm.executor.execute

    def record(batch):
        recorded.append(list(batch))
        return execute(batch)

    monkeypatch.setattr(llm.executor, "execute", record)
    return recorded


def assert_idle(llm):
    assert len(llm.executor.sessions) == 0
    assert llm.executor.cache.num_used == 0
    llm.executor.cache.check()


def artifact_with(artifact, folder, **model_fields):
    """A copy of the artifact whose manifest's model fields are replaced."""
    shutil.copytree(artifact, folder)
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    data["model"].update(model_fields)
    path.write_text(json.dumps(data))
    return folder


def greedy(max_tokens=20, **kwargs):
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kwargs)


def sampled(seed, max_tokens=20, **kwargs):
    return SamplingParams(temperature=0.9, top_p=0.95, top_k=50, seed=seed,
                          max_tokens=max_tokens, ignore_eos=True, **kwargs)


@pytest.mark.parametrize("kind", ["greedy", "sampled"])
def test_continuous_batching_equals_each_alone(llm, batches, kind):
    params = [greedy(4 + 3 * i) if kind == "greedy" else sampled(10 + i, 4 + 3 * i)
              for i in range(len(PROMPTS))]
    alone = [llm.generate(p, q)[0] for p, q in zip(PROMPTS, params)]
    batches.clear()
    together = llm.generate(PROMPTS, params)
    assert_idle(llm)
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert [o.text for o in together] == [o.text for o in alone]
    assert [len(o.token_ids) for o in together] == [q.max_tokens for q in params]
    assert len({o.token_ids for o in together}) == len(PROMPTS)
    check_schedule(batches)


def check_schedule(batches):
    """At most MAX_SESSIONS sessions and MAX_PREFILL prompt tokens a step; prompts were chunked
    on a grid of MAX_PREFILL from their start (never where a step's budget ran out), and
    requests joined while others were decoding."""
    done_at, first_seen = {}, {}
    for step, batch in enumerate(batches):
        for item in batch:
            first_seen.setdefault(item.sid, step)
            if item.produce_output and item.sid not in done_at:
                done_at[item.sid] = step
    has_chunked = has_joined = False
    for step, batch in enumerate(batches):
        assert len({item.sid for item in batch}) <= MAX_SESSIONS
        prefill = [item for item in batch if step <= done_at[item.sid]]
        decoding = [item for item in batch if step > done_at[item.sid]]
        assert sum(len(item.tokens) for item in prefill) <= MAX_PREFILL
        assert all(item.position % MAX_PREFILL == 0 for item in prefill), step
        assert all(item.produce_output or len(item.tokens) == MAX_PREFILL for item in prefill)
        assert all(len(item.tokens) == 1 for item in decoding)
        has_chunked |= any(not item.produce_output for item in prefill)
        has_joined |= bool(decoding) and any(first_seen[i.sid] == step > 0 for i in prefill)
    assert has_chunked and has_joined


def test_max_tokens_is_respected(llm):
    for max_tokens in (1, 2, 7):
        [out] = llm.generate("hello world", greedy(max_tokens))
        assert len(out.token_ids) == max_tokens and out.finish_reason == "length"
    assert_idle(llm)


def test_stop_strings_truncate_the_text(llm):
    full = llm.generate("hello world", greedy(40))[0]
    start = next(k for k in range(8, 30) if "\ufffd" not in full.text[k:k + 3])
    late, early = full.text[start:start + 3], full.text[start - 6:start - 4]
    for stop in [(late,), (late, early)]:
        [out] = llm.generate("hello world", greedy(40, stop=stop))
        cut = min(full.text.find(s) for s in stop)
        assert out.text == full.text[:cut] and out.finish_reason == "stop"
        assert out.token_ids == full.token_ids[:len(out.token_ids)]
        assert len(out.token_ids) < 40
        assert "".join(llm.stream("hello world", greedy(40, stop=stop))) == out.text
    assert_idle(llm)


def test_eos_stops_unless_ignored(llm, artifact, tmp_path):
    full = llm.generate("hello world", greedy(20))[0].token_ids
    index = next(i for i in range(2, 20) if full[i] not in full[:i])
    eos_llm = LLM(artifact_with(artifact, tmp_path / "eos", eos_token_ids=[full[index]]))
    [out] = eos_llm.generate("hello world", SamplingParams(max_tokens=20))
    assert out.token_ids == full[:index + 1] and out.finish_reason == "stop"
    assert out.text == eos_llm.tokenizer.decode(full[:index])
    [out] = eos_llm.generate("hello world", greedy(20))
    assert out.token_ids == full and out.finish_reason == "length"
    assert_idle(eos_llm)


def test_session_budget_stops_with_length(artifact):
    probe = LLM(artifact, max_sessions=1)
    num_prompt = len(probe.tokenizer.encode("hello world", chat=True))
    small = LLM(artifact, max_sessions=2, max_session_tokens=num_prompt + 5)
    [out] = small.generate("hello world", greedy(64))
    assert out.finish_reason == "length" and len(out.token_ids) == 5
    assert out.token_ids == probe.generate("hello world", greedy(5))[0].token_ids
    with pytest.raises(InvalidArgument, match=f"{num_prompt} tokens .* budget of {num_prompt} "):
        LLM(artifact, max_sessions=2, max_session_tokens=num_prompt).generate("hello world")
    assert_idle(small)


@pytest.mark.parametrize("params", [greedy(30), sampled(7, 30), greedy(30, stop=("e",))],
                         ids=["greedy", "sampled", "stop"])
def test_stream_concatenates_to_the_generated_text(llm, params):
    for prompt in ("naïve café 日本語", "hello world"):
        deltas = list(llm.stream(prompt, params))
        assert all(deltas)
        assert "".join(deltas) == llm.generate(prompt, params)[0].text
    assert_idle(llm)


def test_closing_a_stream_early_closes_its_session(llm):
    stream = llm.stream("hello world", greedy(50))
    next(stream)
    assert len(llm.executor.sessions) == 1
    stream.close()
    assert_idle(llm)


def test_a_failing_step_closes_every_session(llm, monkeypatch):
    execute, calls = llm.executor.execute, []

    def fail_later(batch):
        calls.append(batch)
        if len(calls) == 4:
            raise ExecutionFailed("engine exploded", tuple(item.sid for item in batch))
        return execute(batch)

    monkeypatch.setattr(llm.executor, "execute", fail_later)
    with pytest.raises(ExecutionFailed, match="exploded"):
        llm.generate(PROMPTS, greedy(10))
    assert_idle(llm)


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-1.0), "temperature -1.0"),
    (dict(temperature=float("nan")), "temperature nan"),
    (dict(top_p=1.5), "top_p 1.5"),
    (dict(top_k=-2), "top_k -2"),
    (dict(max_tokens=0), "max_tokens 0"),
    (dict(max_tokens=2.5), "max_tokens 2.5"),
    (dict(stop=("",)), "stop"),
    (dict(seed=-1), "seed -1"),
    (dict(ignore_eos="yes"), "ignore_eos 'yes'"),
])
def test_invalid_sampling_params_are_refused(kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        SamplingParams(**kwargs)


def test_a_single_stop_string_is_accepted():
    assert SamplingParams(stop="END").stop == ("END",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")


@pytest.mark.parametrize("prompts, params, match", [
    ([], None, "non-empty"),
    (["ok", 3], None, "prompt 3"),
    (["ok", "ok"], [SamplingParams()], "1 SamplingParams for 2 prompts"),
    (["ok", "ok"], "greedy", "params"),
    (["ok", "long " * 400], None, r"prompt 1: \d+ tokens leave no room in the budget of 256 "),
])
def test_bad_inputs_open_no_session(llm, batches, prompts, params, match):
    with pytest.raises(InvalidArgument, match=match):
        llm.generate(prompts, params)
    assert batches == []
    assert_idle(llm)


@pytest.mark.parametrize("prompt, params", [
    ("long " * 400, None), (["ok"], None), ("ok", [SamplingParams()])])
def test_bad_stream_inputs_are_refused_at_the_call(llm, batches, prompt, params):
    with pytest.raises(InvalidArgument):
        llm.stream(prompt, params)
    assert batches == []
    assert_idle(llm)


def test_chat_defaults_to_the_template_and_can_be_refused(artifact, tmp_path):
    assert LLM(artifact).chat is True
    plain = LLM(artifact, chat=False)
    ids = plain.make_requests("hi", None)[0].prompt_token_ids
    assert ids == tuple(plain.tokenizer.tokenizer.encode("hi").ids) and ids[0] == 0
    bare = artifact_with(artifact, tmp_path / "bare", chat_template=None)
    assert LLM(bare).chat is False
    with pytest.raises(InvalidArgument, match="no chat template"):
        LLM(bare, chat=True)


def test_decode_chains_keep_every_text(llm, artifact, monkeypatch):
    """On a backend that runs ahead (here the IOBinding backend over numpy memory, what
    ort-cuda runs), steps that only decode run as chains of up to 16 (Executor.decode): every
    text, token and finish reason equals ort-cpu's step by step, with stops inside chains
    (which end them), requests waiting for a session, and chains cut to what max_tokens
    leaves."""
    from cellspec.runtime.executor import Executor
    from tests.runtime.test_ort_device import host_backend

    full = llm.generate("hello world", greedy(40))[0]
    stop = full.text[13:16]
    params = [greedy(4 + 5 * i) if i % 3 == 0 else sampled(10 + i, 3 + 4 * i)
              for i in range(len(PROMPTS))]
    params[1] = greedy(40, stop=(stop,))
    params[2] = SamplingParams(max_tokens=30, temperature=0.9, seed=3)  # eos may stop it
    prompts = ["hello world"] * 2 + PROMPTS
    params = [greedy(40, stop=(stop,)), greedy(30)] + params
    expected = llm.generate(prompts, params)

    chained = LLM(artifact, max_sessions=MAX_SESSIONS, max_prefill_tokens=MAX_PREFILL)
    chained.executor = Executor.load(artifact, backend=host_backend(artifact, MAX_SESSIONS),
                                     max_sessions=MAX_SESSIONS)
    chains = []
    decode = chained.executor.decode

    def record(batch, steps, on_step):
        outs = decode(batch, steps, on_step)
        chains.append((len(batch), steps, len(outs[0].tokens)))
        return outs

    monkeypatch.setattr(chained.executor, "decode", record)
    got = chained.generate(prompts, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in expected]
    assert [o.text for o in got] == [o.text for o in expected]
    assert [o.finish_reason for o in got] == [o.finish_reason for o in expected]
    assert expected[0].finish_reason == "stop" and len(expected[0].token_ids) < 40
    assert max(steps for _, steps, _ in chains) == 16
    assert any(1 < steps < 16 for _, steps, _ in chains)  # cut to a request's max_tokens
    assert any(ran < steps for _, steps, ran in chains), chains  # a finished request ended it
    assert any(count == MAX_SESSIONS for count, _, _ in chains)
    assert "".join(chained.stream("hello world", greedy(40, stop=(stop,)))) == expected[0].text
    assert_idle(chained)


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "8", None])
def test_bad_chain_steps_are_refused(artifact, value):
    with pytest.raises(InvalidArgument, match="chain_steps"):
        LLM(artifact, chain_steps=value)
