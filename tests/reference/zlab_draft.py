"""Random DFlash drafts written in the z-lab checkpoint layout (config.json + safetensors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file


def write_random_draft(folder: Path, *, hidden: int, vocab: int, num_target_layers: int,
                       taps: list[int], block_size: int = 4, mask_token_id: int = 0,
                       num_layers: int = 1, heads: int = 4, kv_heads: int = 2,
                       head_dim: int = 16, intermediate: int = 128, seed: int = 0,
                       scale: float = 0.15) -> Path:
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    def norm(size: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(size)).astype(np.float32)

    tensors = {"fc.weight": weight(hidden, len(taps) * hidden), "hidden_norm.weight": norm(hidden),
               "norm.weight": norm(hidden)}
    for i in range(num_layers):
        p = f"layers.{i}."
        tensors |= {
            p + "self_attn.q_proj.weight": weight(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": weight(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": weight(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": weight(hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": norm(head_dim),
            p + "self_attn.k_norm.weight": norm(head_dim),
            p + "mlp.gate_proj.weight": weight(intermediate, hidden),
            p + "mlp.up_proj.weight": weight(intermediate, hidden),
            p + "mlp.down_proj.weight": weight(hidden, intermediate),
            p + "input_layernorm.weight": norm(hidden),
            p + "post_attention_layernorm.weight": norm(hidden),
        }
    config = dict(architectures=["DFlashDraftModel"], vocab_size=vocab, hidden_size=hidden,
                  intermediate_size=intermediate, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, head_dim=head_dim, num_hidden_layers=num_layers,
                  rms_norm_eps=1e-6, max_position_embeddings=8192, hidden_act="silu",
                  rope_theta=10000.0, block_size=block_size,
                  num_target_layers=num_target_layers,
                  dflash_config=dict(mask_token_id=mask_token_id, target_layer_ids=taps))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder
