"""config.json, one field at a time: every malformed value is an InvalidCheckpoint naming it."""

from __future__ import annotations

import math

import pytest

from cellspec.errors import InvalidCheckpoint
from cellspec.export.arch import read_hparams

LLAMA = dict(architectures=["LlamaForCausalLM"], vocab_size=256, hidden_size=64,
             intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
             num_hidden_layers=2, max_position_embeddings=128, rms_norm_eps=1e-5,
             bos_token_id=1, eos_token_id=2)
QWEN3 = {**LLAMA, "architectures": ["Qwen3ForCausalLM"], "head_dim": 16,
         "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}
MISTRAL = {**LLAMA, "architectures": ["MistralForCausalLM"], "sliding_window": 8}
LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
NOT_NUMBERS = ["x", "64", [1], [[1]], {}, {"a": 1}, True]


def edited(base: dict, **changes) -> dict:
    config = dict(base)
    for key, value in changes.items():
        if value is KeyError:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def refused(config: dict, field: str) -> None:
    with pytest.raises(InvalidCheckpoint, match=field):
        read_hparams(config)


@pytest.mark.parametrize("value", [[[1]], {}, None, 0, {"a": 1}, [], KeyError, [None]])
def test_architectures(value):
    refused(edited(LLAMA, architectures=value), "architectures")


@pytest.mark.parametrize("value", [*NOT_NUMBERS, -1e-5, 0, math.nan, math.inf])
def test_rms_norm_eps(value):
    refused(edited(LLAMA, rms_norm_eps=value), "rms_norm_eps")


@pytest.mark.parametrize("key", ["hidden_size", "vocab_size", "num_hidden_layers",
                                 "intermediate_size", "num_attention_heads"])
@pytest.mark.parametrize("value", ["64", 64.0, True, -64, 0, None, [64]])
def test_sizes(key, value):
    refused(edited(LLAMA, **{key: value}), key)


@pytest.mark.parametrize("value", [5, "x", [1], [[1]], True, ["rope_type", "linear"]])
def test_rope_parameters_not_an_object(value):
    refused(edited(LLAMA, rope_parameters=value), "rope_parameters")


@pytest.mark.parametrize("value", [5, "x", [1], True])
def test_rope_scaling_not_an_object(value):
    refused(edited(LLAMA, rope_scaling=value), "rope_scaling")


@pytest.mark.parametrize("value", ["abc", "10000", [1], {}, -1.0, 0, True, math.inf])
def test_rope_theta(value):
    refused(edited(LLAMA, rope_theta=value), "rope_theta")
    refused(edited(LLAMA, rope_parameters={"rope_type": "default", "rope_theta": value}),
            "rope_theta")


@pytest.mark.parametrize("params, field", [
    ({**LLAMA3, "factor": "x"}, "factor"),
    ({**LLAMA3, "factor": 0}, "factor"),
    ({**LLAMA3, "factor": None}, "factor"),
    ({**LLAMA3, "low_freq_factor": [1]}, "low_freq_factor"),
    ({**LLAMA3, "high_freq_factor": 1.0}, "high_freq_factor"),
    ({**LLAMA3, "original_max_position_embeddings": "64"}, "original_max_position_embeddings"),
    ({"rope_type": "linear", "factor": -2.0}, "factor"),
    ({"rope_type": ["linear"]}, "rope type"),
    ({"full_attention": {"rope_type": "default"}}, "full_attention"),
])
def test_rope_scaling_values(params, field):
    refused(edited(LLAMA, rope_parameters=params), field)


@pytest.mark.parametrize("value", ["x", "1", [1], None, {}])
def test_partial_rotary_factor(value):
    config = edited(LLAMA, partial_rotary_factor=value)
    if value is None:  # null is the default, as in transformers
        assert read_hparams(config).head_dim == 16
    else:
        refused(config, "partial_rotary_factor")


@pytest.mark.parametrize("key", ["tie_word_embeddings", "attention_bias", "mlp_bias"])
@pytest.mark.parametrize("value", ["x", "true", 1, 0, [1], {}])
def test_booleans(key, value):
    refused(edited(LLAMA, **{key: value}), key)


@pytest.mark.parametrize("value", ["x", "1", -1, 256, 1.5, True, [1], {}])
def test_bos_token_id(value):
    refused(edited(LLAMA, bos_token_id=value), "bos_token_id")


@pytest.mark.parametrize("value", ["x", "2", -1, 256, 1.5, True, [[1]], {}, [2, "x"], [2, 300]])
def test_eos_token_id(value):
    refused(edited(LLAMA, eos_token_id=value), "eos_token_id")


@pytest.mark.parametrize("value", [1, ["silu"], None])
def test_hidden_act(value):
    refused(edited(LLAMA, hidden_act=value), "hidden_act")


@pytest.mark.parametrize("value", [-1, 0, "8", 1.5, True, [8], {}, 10**30 + 0.5])
def test_mistral_sliding_window(value):
    refused(edited(MISTRAL, sliding_window=value), "sliding_window")


@pytest.mark.parametrize("value", [-1, 0, "8", 1.5, True, [8], {}])
def test_qwen3_sliding_window(value):
    refused(edited(QWEN3, sliding_window=value), "sliding_window")


def test_sliding_window_none_and_unused_follow_transformers():
    assert read_hparams(edited(MISTRAL, sliding_window=None)).windows == (0, 0)
    assert read_hparams(edited(MISTRAL, sliding_window=KeyError)).windows == (4096, 4096)
    assert read_hparams(edited(QWEN3, sliding_window=None)).windows == (0, 0)
    unused = edited(QWEN3, use_sliding_window=False, sliding_window=-1)
    assert read_hparams(unused).windows == (0, 0)  # Qwen3Config drops it unused


@pytest.mark.parametrize("value", [5, "x", ["x", "y"], [1, 2], {}, ["full_attention"], True])
def test_layer_types(value):
    refused(edited(QWEN3, layer_types=value), "layer_types")


@pytest.mark.parametrize("value", ["x", "1", [1], {}, -1, 1.5, True])
def test_max_window_layers(value):
    refused(edited(QWEN3, max_window_layers=value), "max_window_layers")


@pytest.mark.parametrize("value", ["x", "true", 1, [1], {}])
def test_use_sliding_window(value):
    refused(edited(QWEN3, use_sliding_window=value), "use_sliding_window")


def test_a_sound_config_still_reads():
    hp = read_hparams(edited(QWEN3, eos_token_id=[2, 3], rope_parameters=LLAMA3))
    assert hp.windows == (0, 8) and hp.eos_token_ids == (2, 3)
    assert hp.rope_scaling["factor"] == 8.0
    assert read_hparams(edited(LLAMA, bos_token_id=None, eos_token_id=None)).eos_token_ids == ()


DRAFT = dict(architectures=["DFlashDraftModel"], vocab_size=256, hidden_size=64,
             intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             num_hidden_layers=2, rms_norm_eps=1e-6, block_size=5, num_target_layers=2,
             dflash_config=dict(mask_token_id=255, target_layer_ids=[0, 1]))


@pytest.mark.parametrize("key, value", [
    ("dflash_config", "x"), ("dflash_config", [1]), ("dflash_config", 5),
    ("layer_types", 5), ("layer_types", "full_attention"), ("block_size", "5"),
    ("num_target_layers", "2"),
])
def test_draft_config(key, value):
    from cellspec.export.draft_checkpoint import read_draft_spec

    target = read_hparams(edited(QWEN3, use_sliding_window=False))
    read_draft_spec(DRAFT, target)
    with pytest.raises(InvalidCheckpoint, match=f"draft config {key}"):
        read_draft_spec(edited(DRAFT, **{key: value}), target)
