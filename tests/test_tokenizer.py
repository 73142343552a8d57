"""Tokenizer: chat rendering as transformers renders it, one BOS, incremental decoding that never
ends inside a UTF-8 character."""

import pytest

from cellspec.artifact import Manifest
from cellspec.errors import InvalidArgument
from cellspec.tokenizer import IncrementalDetokenizer, Tokenizer, compile_chat_template
from tests.tiny_chat import CHAT_TEMPLATE, tiny_chat_artifact

TEXT = "naïve café 日本語 🙂🚀 über"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    artifact = tiny_chat_artifact(tmp_path_factory)
    return Tokenizer.load(artifact, Manifest.load(artifact))


def byte_token_ids(tokenizer, text):
    """One token per UTF-8 byte: the byte-level alphabet's single-character tokens."""
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = sorted(ByteLevel.alphabet(), key=lambda c: c.encode("utf-8"))
    spelled = ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(text)[0][0]
    assert set(spelled) <= set(alphabet)
    return [tokenizer.tokenizer.token_to_id(c) for c in spelled]


def test_deltas_never_end_inside_a_character(tokenizer):
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.add(token) for token in byte_token_ids(tokenizer, TEXT)]
    deltas.append(detokenizer.flush())
    assert "".join(deltas) == TEXT
    assert not any("\ufffd" in d for d in deltas)
    assert deltas.count("") >= len(TEXT.encode()) - len(TEXT)  # continuation bytes held back


def test_flush_releases_an_unfinished_character(tokenizer):
    detokenizer = IncrementalDetokenizer(tokenizer)
    ids = byte_token_ids(tokenizer, "a日")
    assert [detokenizer.add(t) for t in ids[:3]] == ["a", "", ""]
    assert detokenizer.flush() == "\ufffd"


def test_incremental_text_equals_a_whole_decode(tokenizer):
    ids = tokenizer.tokenizer.encode(TEXT + " the quick brown fox").ids
    detokenizer = IncrementalDetokenizer(tokenizer)
    text = "".join(detokenizer.add(t) for t in ids) + detokenizer.flush()
    assert text == tokenizer.decode(ids) == TEXT + " the quick brown fox"


def test_chat_ids_equal_transformers_apply_chat_template(tokenizer, tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    artifact = tiny_chat_artifact(tmp_path_factory)
    reference = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(artifact / "tokenizer.json"), bos_token="<s>", eos_token="</s>")
    reference.chat_template = CHAT_TEMPLATE
    for prompt in ("hi", TEXT, "<|im_end|> inside"):
        expected = reference.apply_chat_template([{"role": "user", "content": prompt}],
                                                 add_generation_prompt=True, tokenize=True)
        expected = expected if isinstance(expected, list) else expected["input_ids"]
        assert tokenizer.encode(prompt, chat=True) == expected


def test_special_tokens_are_encoded_once_as_special_tokens(tokenizer):
    ids = tokenizer.encode("hello", chat=True)
    assert ids[0] == 0 and ids.count(0) == 1  # the template's BOS, not doubled
    assert ids[1] == 2 and ids.count(2) == 2 and ids.count(3) == 1  # <|im_start|>, <|im_end|>
    plain = tokenizer.encode("hello", chat=False)
    assert plain[0] == 0 and plain.count(0) == 1  # the post-processor's BOS
    assert tokenizer.encode("<s>hello", chat=False) == plain  # a BOS in the text: still one


def test_template_helpers():
    template = compile_chat_template(
        "{{ messages | tojson }}{% if not ok %}{{ raise_exception('no ok') }}{% endif %}")
    assert template.render(messages=[{"a": "é"}], ok=True) == '[{"a": "é"}]'
    with pytest.raises(InvalidArgument, match="chat template: no ok"):
        template.render(messages=[], ok=False)
