"""An independent torch reference of the DFlash draft (z-lab `dflash/model.py`, DFlashDraftModel).

Written from the published math, with the transformers Qwen3 building blocks z-lab itself uses
(Qwen3RMSNorm, Qwen3MLP, Qwen3RotaryEmbedding, rotate_half); it shares no code with cellspec.
Parameter names are the z-lab checkpoint's, so `state_dict()` is a checkpoint in that layout.

The choices, each from z-lab `dflash/model.py`:
- Context: `target_hidden = self.hidden_norm(self.fc(target_hidden))` in DFlashDraftModel.forward,
  once, before the layers; every layer reads this same tensor (the layer is called with
  `target_hidden=target_hidden`), never the residual stream.
- Context keys/values skip input_layernorm: Qwen3DFlashDecoderLayer.forward normalises only
  `hidden_states` (`hidden_states = self.input_layernorm(hidden_states)`) and hands
  `target_hidden` to self_attn as is; there `k_ctx = self.k_proj(target_hidden)`,
  `v_ctx = self.v_proj(target_hidden)`.
- k_norm covers context and block keys: `k = torch.cat([k_ctx, k_noise], ...)` then
  `k = self.k_norm(k)`; q_norm on the block's queries (`q = self.q_norm(q)`); values unnormed.
- Positions: `position_ids` spans [context ; block] (dflash_generate passes
  `position_ids[:, start - target_hidden.shape[1] : start + block_size]`, the block starting at
  the anchor's position `start` right after the context); keys take all of them
  (`k_embed = (k * cos) + ...`), queries the last q_len (`q * cos[..., -q_len:, :]`).
- Attention is non-causal: `is_causal=False` (first release) / `is_causal` False for
  full-attention layers with no mask (current), so each block token sees the whole context and
  the whole block. Scale head_dim ** -0.5, GQA by repeating kv heads.
- Residual: the stream starts at the block's embeddings (`hidden_states = noise_embedding`,
  the target's `embed_tokens`), `residual + attn`, `residual + mlp`; target hidden states are
  never added to it. Output `self.norm(hidden_states)`, then the target's `lm_head`; the draft's
  proposals are rows 1..block-1 (`[:, 1 - block_size:, :]`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import (
    Qwen3MLP,
    Qwen3RMSNorm,
    Qwen3RotaryEmbedding,
    rotate_half,
)


class RefAttention(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.heads, self.kv_heads, self.head_dim = (config.num_attention_heads,
                                                    config.num_key_value_heads, d)
        self.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)
        self.q_norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(d, eps=config.rms_norm_eps)

    def forward(self, block: torch.Tensor, context: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        """block [B, H] (after input_layernorm), context [C, H] (fc + hidden_norm output),
        cos/sin [C + B, D] -> [B, H]."""
        b, d = block.shape[0], self.head_dim
        q = self.q_norm(self.q_proj(block).view(b, self.heads, d))
        k = torch.cat([self.k_proj(context), self.k_proj(block)]).view(-1, self.kv_heads, d)
        v = torch.cat([self.v_proj(context), self.v_proj(block)]).view(-1, self.kv_heads, d)
        k = self.k_norm(k)
        q = q * cos[-b:, None] + rotate_half(q) * sin[-b:, None]
        k = k * cos[:, None] + rotate_half(k) * sin[:, None]
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, C + B, D]
        v = v.repeat_interleave(group, dim=1).transpose(0, 1)
        scores = q.transpose(0, 1) @ k.transpose(1, 2) * d**-0.5  # [heads, B, C + B], no mask
        out = torch.softmax(scores, dim=-1) @ v  # [heads, B, D]
        return self.o_proj(out.transpose(0, 1).reshape(b, -1))


class RefLayer(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        self.self_attn = RefAttention(config)
        self.mlp = Qwen3MLP(config)
        self.input_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, x: torch.Tensor, context: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), context, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftRef(nn.Module):
    """The draft; `state_dict()` keys are the z-lab checkpoint's (`layers.{i}...`, `fc.weight`,
    `hidden_norm.weight`, `norm.weight`)."""

    def __init__(self, config: Qwen3Config, num_taps: int) -> None:
        super().__init__()
        h = config.hidden_size
        self.layers = nn.ModuleList(RefLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.fc = nn.Linear(num_taps * h, h, bias=False)
        self.hidden_norm = Qwen3RMSNorm(h, eps=config.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(config)

    def forward(self, taps: torch.Tensor, block_embeddings: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        """taps [C, n_taps * H] (the owner's whole context), block_embeddings [B, H],
        positions [C + B] -> the normed block hidden states [B, H]."""
        context = self.hidden_norm(self.fc(taps))
        cos, sin = self.rotary_emb(block_embeddings, positions[None])
        cos, sin = cos[0], sin[0]
        x = block_embeddings
        for layer in self.layers:
            x = layer(x, context, cos, sin)
        return self.norm(x)


def make_config(values: dict[str, Any]) -> Qwen3Config:
    """A Qwen3Config from a draft config.json's hyper-parameters (extra DFlash keys ignored)."""
    keys = ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "rms_norm_eps", "num_hidden_layers", "vocab_size",
            "max_position_embeddings", "rope_parameters", "hidden_act")
    return Qwen3Config(**{k: values[k] for k in keys if k in values})


@torch.no_grad()
def draft_logits(draft: DFlashDraftRef, embed: torch.Tensor, lm_head: torch.Tensor,
                 taps: torch.Tensor, block_tokens: torch.Tensor,
                 positions: torch.Tensor) -> torch.Tensor:
    """One owner's block: taps [C, n_taps * H], block_tokens [B] (anchor, mask...), positions
    [C + B] -> logits [B, V] through the target's embedding [V, H] and LM head [V, H]."""
    hidden = draft(taps, embed[block_tokens], positions)
    return hidden @ lm_head.T
