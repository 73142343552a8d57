"""The draft's shape: hyper-parameters, taps, block, mask token; z-lab config.json both ways."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ARCHITECTURE = "DFlashDraftModel"


@dataclass(frozen=True)
class DraftConfig:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int
    block_size: int
    mask_token_id: int
    tap_layer_ids: tuple[int, ...]
    num_target_layers: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "tap_layer_ids", tuple(self.tap_layer_ids))
        taps = self.tap_layer_ids
        if not taps or len(set(taps)) != len(taps) or not all(
                0 <= t < self.num_target_layers for t in taps):
            raise ValueError(f"taps {list(taps)}: expected distinct layer ids in "
                             f"0..{self.num_target_layers - 1}")
        if self.block_size < 3:
            raise ValueError(f"block_size {self.block_size}: expected >= 3 (an anchor and at "
                             "least two proposals)")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id}: expected a token id in "
                             f"0..{self.vocab_size - 1}")
        if self.num_layers < 1 or self.num_heads % self.num_kv_heads:
            raise ValueError(f"layers {self.num_layers}, heads {self.num_heads}/"
                             f"{self.num_kv_heads}: expected >= 1 layer, heads % kv_heads == 0")

    @classmethod
    def for_target(cls, target: dict[str, Any], *, num_layers: int, block_size: int,
                   taps: tuple[int, ...], mask_token_id: int,
                   intermediate_size: int | None = None) -> DraftConfig:
        """A draft of the target's width, heads and rope (z-lab copies the target's Qwen3
        hyper-parameters); depth, MLP width, block, taps and mask token chosen here."""
        heads = target["num_attention_heads"]
        rope = target.get("rope_parameters") or {}
        return cls(hidden_size=target["hidden_size"], num_layers=num_layers, num_heads=heads,
                   num_kv_heads=target.get("num_key_value_heads") or heads,
                   head_dim=target.get("head_dim") or target["hidden_size"] // heads,
                   intermediate_size=intermediate_size or target["intermediate_size"],
                   rms_eps=float(target.get("rms_norm_eps", 1e-6)),
                   rope_theta=float(rope.get("rope_theta", target.get("rope_theta", 10000.0))),
                   max_position_embeddings=target.get("max_position_embeddings", 4096),
                   vocab_size=target["vocab_size"], block_size=block_size,
                   mask_token_id=mask_token_id, tap_layer_ids=tuple(taps),
                   num_target_layers=target["num_hidden_layers"])

    def zlab_config(self, dtype: str = "float16") -> dict[str, Any]:
        """config.json in z-lab's layout (Qwen3 keys + block_size, num_target_layers and
        dflash_config), as cellspec.export.draft_checkpoint reads it."""
        return dict(
            architectures=[ARCHITECTURE], model_type="qwen3", hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
            head_dim=self.head_dim, hidden_act="silu", rms_norm_eps=self.rms_eps,
            rope_theta=self.rope_theta,
            rope_parameters=dict(rope_type="default", rope_theta=self.rope_theta),
            max_position_embeddings=self.max_position_embeddings, vocab_size=self.vocab_size,
            attention_bias=False, tie_word_embeddings=False, torch_dtype=dtype,
            layer_types=["full_attention"] * self.num_layers, block_size=self.block_size,
            num_target_layers=self.num_target_layers,
            dflash_config=dict(mask_token_id=self.mask_token_id,
                               target_layer_ids=list(self.tap_layer_ids)))

    @classmethod
    def from_zlab(cls, config: dict[str, Any]) -> DraftConfig:
        dflash = config.get("dflash_config") or {}
        rope = config.get("rope_parameters") or {}
        return cls(hidden_size=config["hidden_size"], num_layers=config["num_hidden_layers"],
                   num_heads=config["num_attention_heads"],
                   num_kv_heads=config["num_key_value_heads"], head_dim=config["head_dim"],
                   intermediate_size=config["intermediate_size"],
                   rms_eps=config["rms_norm_eps"],
                   rope_theta=float(rope.get("rope_theta", config.get("rope_theta", 10000.0))),
                   max_position_embeddings=config["max_position_embeddings"],
                   vocab_size=config["vocab_size"],
                   block_size=dflash.get("block_size", config["block_size"]),
                   mask_token_id=dflash.get("mask_token_id", config.get("mask_token_id")),
                   tap_layer_ids=tuple(dflash.get("target_layer_ids",
                                                  config.get("target_layer_ids"))),
                   num_target_layers=config["num_target_layers"])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tap_layer_ids": list(self.tap_layer_ids)}

    def num_params(self) -> int:
        h, d, inner = self.hidden_size, self.head_dim, self.intermediate_size
        attention = 2 * h * self.num_heads * d + 2 * h * self.num_kv_heads * d + 2 * d
        layer = attention + 3 * h * inner + 2 * h
        return self.num_layers * layer + len(self.tap_layer_ids) * h * h + 2 * h


def spread_taps(num_target_layers: int, count: int) -> tuple[int, ...]:
    """z-lab's choice of target layers: one in the middle, else `count` evenly spaced from
    layer 1 to layer L-3 (Qwen3-8B, 36 layers, 5 taps: 1, 9, 17, 25, 33)."""
    if count == 1:
        return (num_target_layers // 2,)
    start, end = 1, num_target_layers - 3
    return tuple(round(start + i * (end - start) / (count - 1)) for i in range(count))
