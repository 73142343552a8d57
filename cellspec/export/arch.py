"""Architectures are data: a registry of small specs, and the normalized hyper-parameters.

Sliding windows follow transformers 5.x: a windowed layer lets query position q see key position
k iff `q - window < k <= q`, i.e. a key at distance == window is NOT visible (masking_utils,
`sliding_window_overlay`). `Hparams.windows[i]` is that window, 0 for full attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from cellspec.errors import InvalidCheckpoint


@dataclass(frozen=True)
class ArchSpec:
    key: str  # the manifest's architecture name
    has_qk_norm: bool  # RMSNorm over head_dim on q and k before rope (Qwen3)
    window_rule: str  # "none" | "qwen3" (layer_types / max_window_layers) | "all" (Mistral)
    has_mlp_bias_key: bool  # config `mlp_bias` may add biases to the MLP projections
    default_head_dim: int | None = None  # when config has no head_dim; None = hidden / heads
    mlp: str = "swiglu"  # down(silu(gate(x)) * up(x))


# Defaults for keys a config.json may omit are those of the transformers config classes.
DEFAULT_SLIDING_WINDOW = 4096  # MistralConfig and Qwen3Config
ARCHITECTURES: dict[str, ArchSpec] = {
    "LlamaForCausalLM": ArchSpec("llama", False, "none", True),
    "MistralForCausalLM": ArchSpec("mistral", False, "all", False),
    "Qwen3ForCausalLM": ArchSpec("qwen3", True, "qwen3", False, default_head_dim=128),
}
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class Hparams:
    """The hyper-parameters the graphs need, normalized across config spellings."""

    spec: ArchSpec
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None  # None for plain rope; else the HF rope parameters
    tie_word_embeddings: bool
    attention_bias: bool
    mlp_bias: bool
    windows: tuple[int, ...]  # per layer; 0 = full attention
    max_position_embeddings: int
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]


def arch_spec(config: dict[str, Any]) -> ArchSpec:
    names = config.get("architectures")
    name = names[0] if isinstance(names, list) and names else names
    if not isinstance(name, str) or name not in ARCHITECTURES:
        raise InvalidCheckpoint(f"config architectures: {names!r}, supported are "
                                f"{', '.join(ARCHITECTURES)}")
    return ARCHITECTURES[name]


def read_hparams(config: dict[str, Any]) -> Hparams:
    """Normalize a HF config.json; raises InvalidCheckpoint naming a missing or bad key."""
    spec = arch_spec(config)
    if config.get("hidden_act", "silu") != "silu":
        raise InvalidCheckpoint(f"config hidden_act: {config['hidden_act']!r}, only silu is "
                                "supported")
    hidden, heads = _int(config, "hidden_size"), _int(config, "num_attention_heads")
    layers, vocab = _int(config, "num_hidden_layers"), _int(config, "vocab_size")
    kv_heads = _int(config, "num_key_value_heads", heads)
    if heads % kv_heads:
        raise InvalidCheckpoint(f"num_attention_heads {heads} is not a multiple of "
                                f"num_key_value_heads {kv_heads}")
    theta, scaling = _rope(config)
    return Hparams(
        spec=spec,
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=_int(config, "head_dim", spec.default_head_dim or hidden // heads),
        intermediate_size=_int(config, "intermediate_size"),
        rms_eps=_positive_number(config, "rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        tie_word_embeddings=_bool(config, "tie_word_embeddings", False),
        attention_bias=_bool(config, "attention_bias", False),
        mlp_bias=spec.has_mlp_bias_key and _bool(config, "mlp_bias", False),
        windows=_windows(spec, config, layers),
        max_position_embeddings=_int(config, "max_position_embeddings", 4096),
        bos_token_id=_bos_id(config.get("bos_token_id"), vocab),
        eos_token_ids=_eos_ids(config.get("eos_token_id"), vocab),
    )


def rope_inv_freq(hp: Hparams) -> np.ndarray:
    """inv_freq [head_dim / 2] float32, with linear or llama3 scaling as transformers computes."""
    dim = hp.head_dim
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim
    inv_freq = (1.0 / hp.rope_theta**exponent).astype(np.float32)
    scaling = hp.rope_scaling or {}
    kind = scaling.get("rope_type", "default")
    if kind == "linear":
        return (inv_freq / np.float32(scaling["factor"])).astype(np.float32)
    if kind != "llama3":
        return inv_freq
    factor = float(scaling["factor"])
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_len = float(scaling.get("original_max_position_embeddings", hp.max_position_embeddings))
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def _rope(config: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    # transformers 5 writes `rope_parameters`; older configs `rope_theta` + `rope_scaling`.
    params = _rope_parameters(config)
    theta = _positive_number({"rope_theta": config.get("rope_theta"), **params}, "rope_theta",
                             10000.0)
    kind = params.get("rope_type", params.get("type", "default"))
    if not isinstance(kind, str) or kind not in ROPE_TYPES:
        raise InvalidCheckpoint(f"rope type {kind!r}: supported are {', '.join(ROPE_TYPES)}")
    partial = _number({"partial_rotary_factor": config.get("partial_rotary_factor"), **params},
                      "partial_rotary_factor", 1.0)
    if partial != 1:
        raise InvalidCheckpoint(f"config partial_rotary_factor: {partial!r}, only 1 is supported")
    if kind == "default":
        return theta, None
    scaling = {k: v for k, v in params.items() if k not in ("type", "rope_theta")}
    scaling["rope_type"] = kind
    scaling["factor"] = _positive_number(params, "factor")
    if kind == "llama3":
        _check_llama3(config, params, scaling)
    return theta, scaling


def _rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    key = "rope_parameters" if config.get("rope_parameters") is not None else "rope_scaling"
    params = config.get(key)
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidCheckpoint(f"config {key}: {params!r}, expected an object")
    nested = [k for k, v in params.items() if isinstance(v, dict)]
    if nested:  # transformers 5 allows rope parameters per layer type
        raise InvalidCheckpoint(f"config {key}: per-layer-type rope parameters "
                                f"({', '.join(nested)}) are not supported")
    return params


def _check_llama3(config: dict[str, Any], params: dict[str, Any],
                  scaling: dict[str, Any]) -> None:
    low = scaling["low_freq_factor"] = _positive_number(params, "low_freq_factor")
    high = scaling["high_freq_factor"] = _positive_number(params, "high_freq_factor")
    if not low < high:
        raise InvalidCheckpoint(f"config high_freq_factor: {high!r}, expected more than "
                                f"low_freq_factor {low!r}")
    default = config.get("original_max_position_embeddings",
                         _int(config, "max_position_embeddings", 4096))
    scaling["original_max_position_embeddings"] = _int(
        params, "original_max_position_embeddings", default)


def _windows(spec: ArchSpec, config: dict[str, Any], layers: int) -> tuple[int, ...]:
    """Per layer: the window, 0 for full attention. A window is null (none) or an integer > 0,
    as transformers' configs and masks take it."""
    if spec.window_rule == "none":
        return (0,) * layers
    if spec.window_rule == "all":  # Mistral: every layer, when sliding_window is set
        return (_window(config, DEFAULT_SLIDING_WINDOW),) * layers
    # Qwen3Config.__post_init__: sliding_window only counts with use_sliding_window, and
    # layer_types defaults to sliding for layers >= max_window_layers.
    is_used = _bool(config, "use_sliding_window", False)
    window = _window(config, DEFAULT_SLIDING_WINDOW) if is_used else 0
    types = config.get("layer_types")
    if types is None:
        start = _int(config, "max_window_layers", 28, minimum=0)
        types = ["sliding_attention" if window and i >= start else "full_attention"
                 for i in range(layers)]
    if not isinstance(types, list) or len(types) != layers \
            or not set(types) <= {"sliding_attention", "full_attention"}:
        raise InvalidCheckpoint(f"config layer_types: {types!r}, expected {layers} of "
                                "'full_attention' and 'sliding_attention'")
    if "sliding_attention" in types and not window:
        raise InvalidCheckpoint(f"config layer_types {types} has sliding layers but no "
                                "sliding_window")
    return tuple(window if t == "sliding_attention" else 0 for t in types)


def _window(config: dict[str, Any], default: int) -> int:
    """sliding_window: missing = the config class default; null = no window (0)."""
    if "sliding_window" in config and config["sliding_window"] is None:
        return 0
    return _int(config, "sliding_window", default)


def _bos_id(value: Any, vocab_size: int) -> int | None:
    return None if value is None else _token_id(value, "bos_token_id", vocab_size)


def _eos_ids(value: Any, vocab_size: int) -> tuple[int, ...]:
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    return tuple(_token_id(v, "eos_token_id", vocab_size) for v in values)


def _token_id(value: Any, key: str, vocab_size: int) -> int:
    if not _is_int(value) or not 0 <= value < vocab_size:
        raise InvalidCheckpoint(f"config {key}: {value!r}, expected a token id in "
                                f"0..{vocab_size - 1}")
    return value


def _int(config: dict[str, Any], key: str, default: int | None = None, minimum: int = 1) -> int:
    value = config.get(key)
    if value is None:
        value = default
    if not _is_int(value) or value < minimum:
        expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InvalidCheckpoint(f"config {key}: {value!r}, expected {expected}")
    return value


def _number(config: dict[str, Any], key: str, default: float | None = None) -> float:
    value = config.get(key)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidCheckpoint(f"config {key}: {value!r}, expected a number")
    return float(value)


def _positive_number(config: dict[str, Any], key: str, default: float | None = None) -> float:
    value = _number(config, key, default)
    if value <= 0:
        raise InvalidCheckpoint(f"config {key}: {value!r}, expected a number > 0")
    return value


def _bool(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidCheckpoint(f"config {key}: {value!r}, expected true or false")
    return value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
