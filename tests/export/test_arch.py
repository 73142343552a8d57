"""Hyper-parameters read from raw config.json dicts agree with the transformers config classes."""

from __future__ import annotations

import numpy as np
import pytest

from cellspec.errors import InvalidCheckpoint
from cellspec.export.arch import read_hparams, rope_inv_freq

BASE = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_attention_heads=4,
            num_key_value_heads=2, num_hidden_layers=4, max_position_embeddings=128)


def _hf_windows(class_name: str, raw: dict) -> tuple[int, ...]:
    import transformers

    config = getattr(transformers, class_name)(**raw)
    types = getattr(config, "layer_types", None) or ["sliding_attention"] * config.num_hidden_layers
    window = config.sliding_window
    return tuple(window if t == "sliding_attention" and window else 0 for t in types)


@pytest.mark.parametrize("extra", [
    dict(),
    dict(use_sliding_window=True, sliding_window=8, max_window_layers=2),
    dict(use_sliding_window=True, sliding_window=8, max_window_layers=0),
    dict(use_sliding_window=False, sliding_window=8, max_window_layers=1),
    dict(use_sliding_window=True),  # default sliding_window 4096, max_window_layers 28
    dict(use_sliding_window=True, sliding_window=8,
         layer_types=["sliding_attention", "full_attention"] * 2),
])
def test_qwen3_windows_follow_transformers(extra):
    raw = {**BASE, "architectures": ["Qwen3ForCausalLM"], "head_dim": 16, **extra}
    assert read_hparams(raw).windows == _hf_windows("Qwen3Config", raw)


@pytest.mark.parametrize("extra", [dict(sliding_window=6), dict(sliding_window=None), dict()])
def test_mistral_windows_follow_transformers(extra):
    raw = {**BASE, "architectures": ["MistralForCausalLM"], **extra}
    assert read_hparams(raw).windows == _hf_windows("MistralConfig", raw)


@pytest.mark.parametrize("rope", [
    dict(rope_theta=500000.0),
    dict(rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=64),
         rope_theta=10000.0),
    dict(rope_parameters=dict(rope_type="linear", factor=2.0, rope_theta=10000.0)),
])
def test_rope_inv_freq_matches_transformers(rope):
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    raw = {**BASE, "architectures": ["LlamaForCausalLM"], **rope}
    config = transformers.LlamaConfig(**raw)
    kind = config.rope_parameters["rope_type"]
    if kind == "default":
        base = config.rope_parameters["rope_theta"]
        want = 1.0 / base ** (np.arange(0, 16, 2, dtype=np.int64).astype(np.float32) / 16)
    else:
        want = ROPE_INIT_FUNCTIONS[kind](config, "cpu")[0].numpy()
    np.testing.assert_allclose(rope_inv_freq(read_hparams(raw)), want, rtol=1e-6)


def test_config_errors():
    raw = {**BASE, "architectures": ["LlamaForCausalLM"]}
    with pytest.raises(InvalidCheckpoint, match="hidden_size"):
        read_hparams({**raw, "hidden_size": None})
    with pytest.raises(InvalidCheckpoint, match="yarn"):
        read_hparams({**raw, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(InvalidCheckpoint, match="num_key_value_heads 3"):
        read_hparams({**raw, "num_key_value_heads": 3})
    with pytest.raises(InvalidCheckpoint, match="'Foo'"):
        read_hparams({**raw, "architectures": ["Foo"]})
