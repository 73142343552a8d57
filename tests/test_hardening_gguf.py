"""A malformed GGUF (truncated, corrupt, metadata of the wrong type) is one InvalidCheckpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cellspec.errors import InvalidCheckpoint
from cellspec.export.gguf import load_gguf
from tests.export.test_gguf import TINY_HPARAMS, TINY_SHAPES, llama_cpp_permute


def write_gguf(path: Path, *, llama: dict | None = None, keys: dict | None = None) -> Path:
    """A tiny llama GGUF; `llama` overrides `llama.*` keys (None drops one), `keys` adds raw
    (key, (value, GGUFValueType)) pairs, replacing the tokenizer key of the same name."""
    import gguf

    keys = keys or {}
    writer = gguf.GGUFWriter(path, "llama")
    hparams = {**TINY_HPARAMS, **(llama or {})}
    for key, value in hparams.items():
        if isinstance(value, tuple):
            writer.add_key_value(f"llama.{key}", *value)
        elif value is not None:
            getattr(writer, f"add_{key}")(value)
    writer.add_layer_norm_rms_eps(1e-6)
    tokenizer = {"tokenizer.ggml.model": writer.add_tokenizer_model,
                 "tokenizer.ggml.tokens": writer.add_token_list,
                 "tokenizer.ggml.token_type": writer.add_token_types,
                 "tokenizer.ggml.merges": writer.add_token_merges}
    defaults = ["gpt2", ["a", "b", "ab", "<|end|>"], [1, 1, 1, 3], ["a b"]]
    for (key, add), value in zip(tokenizer.items(), defaults):
        if key not in keys:
            add(value)
    for key, (value, kind) in keys.items():
        writer.add_key_value(key, value, kind, sub_type=gguf.GGUFValueType.UINT32
                             if kind == gguf.GGUFValueType.ARRAY else None)
    rng = np.random.default_rng(1)
    for name, shape in TINY_SHAPES.items():
        values = rng.standard_normal(shape).astype(np.float32)
        if ".attn_q" in name or ".attn_k" in name:
            values = llama_cpp_permute(values, 2, 1 if ".attn_k" in name else 2)
        writer.add_tensor(f"{name}.weight", values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    path = write_gguf(tmp_path_factory.mktemp("gguf") / "good.gguf")
    assert load_gguf(path).config["hidden_size"] == 32
    return path.read_bytes()


@pytest.mark.parametrize("cut", [3, 8, 20, 40, 100, 300, 600, -10])
def test_a_truncated_file(good, tmp_path, cut):
    path = tmp_path / "cut.gguf"
    path.write_bytes(good[:cut])
    with pytest.raises(InvalidCheckpoint, match="cut.gguf"):
        load_gguf(path)


def test_corrupt_bytes_never_escape(good, tmp_path):
    """Random corruptions of the header and metadata: each is read or refused, never raised."""
    rng = np.random.default_rng(0)
    path = tmp_path / "corrupt.gguf"
    for _ in range(150):
        data = bytearray(good)
        for pos in rng.integers(4, 1200, size=int(rng.integers(1, 6))):
            data[pos] = int(rng.integers(256))
        path.write_bytes(bytes(data))
        try:
            load_gguf(path)
        except InvalidCheckpoint as error:
            assert "corrupt.gguf" in str(error)


def gguf_types():
    import gguf

    return gguf.GGUFValueType


@pytest.mark.parametrize("llama, message", [
    ({"embedding_length": ("x", "STRING")}, "llama.embedding_length"),
    ({"embedding_length": (32.5, "FLOAT32")}, "llama.embedding_length"),
    ({"embedding_length": (0, "UINT32")}, "llama.embedding_length"),
    ({"context_length": (-5, "INT32")}, "llama.context_length"),
    ({"feed_forward_length": ("64", "STRING")}, "llama.feed_forward_length"),
    ({"rope.freq_base": ("x", "STRING")}, "llama.rope.freq_base"),
    ({"attention.layer_norm_rms_epsilon": ("x", "STRING")},
     "llama.attention.layer_norm_rms_epsilon"),
    ({"attention.key_length": ("x", "STRING")}, "llama.attention.key_length"),
    ({"vocab_size": ("4", "STRING")}, "llama.vocab_size"),
])
def test_metadata_of_the_wrong_type(tmp_path, llama, message):
    types = gguf_types()
    llama = {k: (v[0], types[v[1]]) for k, v in llama.items()}
    if "attention.layer_norm_rms_epsilon" in llama:  # written by write_gguf itself: replace
        keys = {f"llama.{k}": v for k, v in llama.items()}
        path = write_gguf(tmp_path / "bad.gguf", keys=keys)
    else:
        path = write_gguf(tmp_path / "bad.gguf", llama=llama)
    with pytest.raises(InvalidCheckpoint, match=message):
        load_gguf(path)


@pytest.mark.parametrize("key, value, kind, message", [
    ("tokenizer.ggml.merges", 5, "UINT32", "tokenizer.ggml.merges"),
    ("tokenizer.ggml.tokens", 5, "UINT32", "tokenizer.ggml.tokens"),
    ("tokenizer.ggml.token_type", 5, "UINT32", "tokenizer.ggml.token_type"),
    ("tokenizer.chat_template", 5, "UINT32", "tokenizer.chat_template"),
])
def test_tokenizer_metadata_of_the_wrong_type(tmp_path, key, value, kind, message):
    path = write_gguf(tmp_path / "bad.gguf", keys={key: (value, gguf_types()[kind])})
    with pytest.raises(InvalidCheckpoint, match=message):
        load_gguf(path)
