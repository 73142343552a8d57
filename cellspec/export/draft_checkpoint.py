"""A z-lab DFlash draft checkpoint (`DFlashDraftModel`) as export reads it, checked against the
target it drafts for.

The folder holds config.json (Qwen3 hyper-parameters plus `block_size`, `num_target_layers` and
`dflash_config: {mask_token_id, target_layer_ids}`; the DFlash keys may also sit at the top level,
as z-lab's `_draft_value` reads them) and safetensors named `layers.{i}.self_attn.q_proj.weight`,
..., `fc.weight`, `hidden_norm.weight`, `norm.weight`, optionally under a `model.` prefix. The
draft has no embedding or LM head: it uses the target's.

cellspec's one addition to the folder, optional: `proposal_vocab.json`, {"token_ids": [...]}
(ascending, distinct, within the target's vocabulary), the only tokens the draft proposes. The
draft's LM head then multiplies only those rows of the target's head (the shipped SmolLM2 draft:
the 16,384 tokens most frequent in its training answers, 99.6% of them). Proposals are only
proposals: the verify keeps the text exact whatever the draft may propose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cellspec.errors import InvalidCheckpoint
from cellspec.export.arch import Hparams, read_hparams
from cellspec.export.checkpoint import Checkpoint, load_checkpoint

ARCHITECTURE = "DFlashDraftModel"
PROPOSAL_VOCAB_NAME = "proposal_vocab.json"
DEFAULT_BLOCK_SIZE = 16  # z-lab: `_draft_value(config, "block_size", 16)`
# z-lab options that change the math; only their neutral values are exported.
NEUTRAL_OPTIONS = {"input_embedding_scale": 1.0, "output_multiplier": 1.0,
                   "final_logit_softcapping": None, "attention_bias": False, "is_causal": False}


@dataclass(frozen=True)
class DraftSpec:
    """The draft's normalized config. hp: its Qwen3 hyper-parameters (hp.vocab_size is the
    target's); tap_layer_ids: the target layers whose outputs feed `fc`, in order."""

    hp: Hparams
    block_size: int
    mask_token_id: int
    tap_layer_ids: tuple[int, ...]
    num_target_layers: int | None


@dataclass
class DraftCheckpoint:
    spec: DraftSpec
    tensors: Mapping[str, np.ndarray]  # by z-lab name, the `model.` prefix removed
    name: str = ""
    proposal_vocab: tuple[int, ...] | None = None  # the ids it may propose; None: all


def load_draft(path: str | Path, target: Hparams, ckpt: Checkpoint | None = None
               ) -> DraftCheckpoint:
    """Read a z-lab draft folder (`ckpt`: its checkpoint already opened) and check it against
    the target's hyper-parameters; raises InvalidCheckpoint naming the offending field or
    tensor."""
    ckpt = load_checkpoint(Path(path)) if ckpt is None else ckpt
    spec = read_draft_spec(ckpt.config, target)
    tensors = _Unprefixed(ckpt.tensors)
    missing = [n for n in draft_tensor_shapes(spec) if n not in tensors]
    if missing:
        raise InvalidCheckpoint(f"draft {path}: tensor {missing[0]} is missing "
                                f"({len(missing)} missing in all)")
    vocab = read_proposal_vocab(Path(path), target.vocab_size)
    return DraftCheckpoint(spec, tensors, ckpt.name, vocab)


def read_proposal_vocab(folder: Path, vocab_size: int) -> tuple[int, ...] | None:
    """The token ids of `folder/proposal_vocab.json`, checked; None when the file is absent."""
    file = folder / PROPOSAL_VOCAB_NAME
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InvalidCheckpoint(f"{file}: not readable JSON ({e})") from None
    ids = data.get("token_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidCheckpoint(f"{file}: expected {{\"token_ids\": [...]}}, a non-empty list "
                                "of integers")
    if any(b <= a for a, b in zip(ids, ids[1:])):
        raise InvalidCheckpoint(f"{file}: token_ids must be ascending and distinct")
    if ids[0] < 0 or ids[-1] >= vocab_size:
        raise InvalidCheckpoint(f"{file}: token_ids must lie in 0..{vocab_size - 1}, the "
                                f"target's vocabulary (found {ids[0]}..{ids[-1]})")
    return tuple(ids)


def read_draft_spec(config: dict[str, Any], target: Hparams) -> DraftSpec:
    """Normalize and check a draft config.json against the target."""
    names = config.get("architectures") or []
    if names != [ARCHITECTURE]:
        raise InvalidCheckpoint(f"draft architectures {names!r}: expected [{ARCHITECTURE!r}]")
    nested = config.get("dflash_config")
    _require(nested is None or isinstance(nested, dict), "dflash_config",
             f"{nested!r}, expected an object")
    _check_options(config)
    vocab = config.get("vocab_size", target.vocab_size)
    _require(vocab == target.vocab_size, "vocab_size",
             f"{vocab!r}, the target's vocabulary has {target.vocab_size} tokens")
    try:
        hp = read_hparams({**config, "architectures": ["Qwen3ForCausalLM"], "vocab_size": vocab})
    except InvalidCheckpoint as error:
        raise InvalidCheckpoint(f"draft {error}") from error
    _require(not any(hp.windows), "layer_types", "sliding-window draft layers are not supported")
    _require(hp.hidden_size == target.hidden_size, "hidden_size",
             f"{hp.hidden_size}, the target's is {target.hidden_size}")
    block = _draft_value(config, "block_size", DEFAULT_BLOCK_SIZE)
    _require(_is_int(block) and block >= 3, "block_size",
             f"{block!r}, expected an integer >= 3 (an anchor and at least two proposals)")
    mask = _draft_value(config, "mask_token_id")
    _require(_is_int(mask) and 0 <= mask < target.vocab_size, "mask_token_id",
             f"{mask!r}, expected a token id in 0..{target.vocab_size - 1}")
    taps = _draft_value(config, "target_layer_ids")
    _require(isinstance(taps, list) and len(taps) > 0 and all(_is_int(t) for t in taps)
             and len(set(taps)) == len(taps), "target_layer_ids",
             f"{taps!r}, expected a non-empty list of distinct layer ids")
    outside = [t for t in taps if not 0 <= t < target.num_layers]
    _require(not outside, "target_layer_ids",
             f"{outside} outside the target's layers 0..{target.num_layers - 1}")
    depth = config.get("num_target_layers")
    _require(depth is None or depth == target.num_layers, "num_target_layers",
             f"{depth!r}, the target has {target.num_layers} layers")
    return DraftSpec(hp, block, mask, tuple(taps), depth)


def draft_tensor_shapes(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor the draft needs (z-lab names) and its shape."""
    hp = spec.hp
    h, d, inter = hp.hidden_size, hp.head_dim, hp.intermediate_size
    q, kv = hp.num_heads * d, hp.num_kv_heads * d
    shapes = {"fc.weight": (h, len(spec.tap_layer_ids) * h), "hidden_norm.weight": (h,),
              "norm.weight": (h,)}
    for i in range(hp.num_layers):
        p = f"layers.{i}."
        shapes.update({
            f"{p}self_attn.q_proj.weight": (q, h), f"{p}self_attn.k_proj.weight": (kv, h),
            f"{p}self_attn.v_proj.weight": (kv, h), f"{p}self_attn.o_proj.weight": (h, q),
            f"{p}self_attn.q_norm.weight": (d,), f"{p}self_attn.k_norm.weight": (d,),
            f"{p}mlp.gate_proj.weight": (inter, h), f"{p}mlp.up_proj.weight": (inter, h),
            f"{p}mlp.down_proj.weight": (h, inter), f"{p}input_layernorm.weight": (h,),
            f"{p}post_attention_layernorm.weight": (h,)})
    return shapes


class _Unprefixed(Mapping[str, np.ndarray]):
    """The checkpoint's tensors with an optional leading `model.` removed from every name."""

    def __init__(self, tensors: Mapping[str, np.ndarray]) -> None:
        self._tensors = tensors
        self._names = {n.removeprefix("model."): n for n in tensors}

    def __getitem__(self, name: str) -> np.ndarray:
        return self._tensors[self._names[name]]

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _check_options(config: dict[str, Any]) -> None:
    for key, neutral in NEUTRAL_OPTIONS.items():
        value = _draft_value(config, key)
        _require(value is None or value == neutral or (neutral is None and not value), key,
                 f"{value!r} is not supported (only {neutral!r})")
    types = config.get("layer_types") or []
    _require(isinstance(types, list) and all(t == "full_attention" for t in types),
             "layer_types", f"{types!r}: only full_attention draft layers are supported")


def _draft_value(config: dict[str, Any], key: str, default: Any = None) -> Any:
    """z-lab reads `dflash_config[key]`, falling back to the top-level key."""
    nested = config.get("dflash_config") or {}
    return nested.get(key, config.get(key, default))


def _require(ok: bool, field: str, detail: str) -> None:
    if not ok:
        raise InvalidCheckpoint(f"draft config {field}: {detail}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
