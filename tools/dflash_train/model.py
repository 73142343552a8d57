"""The DFlash draft (z-lab DFlashDraftModel math) for packed batches of blocks.

One forward serves N sequences with Q block rows each (A anchors x block_size, packed):
  context = hidden_norm(fc(taps))                           [N, S, H], once, shared by layers
  per layer: q = q_norm(q_proj(ln(x)));  k = k_norm([k_proj(context); k_proj(ln(x))])
             v = [v_proj(context); v_proj(ln(x))]           context skips input_layernorm
             rope on q (block positions) and k ([context ; block] positions)
             x = x + o_proj(attn(q, k, v, mask));  x = x + mlp(post_attention_layernorm(x))
  out = norm(x)                                              then the target's LM head
The residual stream starts from the target's embeddings of the block tokens. `mask` [N, Q, S+Q]
says which keys each block row sees (blocks.py builds it: context before its anchor, its own
block bidirectionally). Parameter names are z-lab's, so `state_dict()` is the checkpoint.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tools.dflash_train.config import DraftConfig


class RMSNorm(nn.Module):
    """Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps) in float32, times the weight."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(inv_freq: torch.Tensor, positions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [N, L] -> cos, sin [N, L, 1, D] (float32; halves repeated, HF layout)."""
    freqs = positions.float()[..., None] * inv_freq  # [N, L, D/2]
    angles = torch.cat((freqs, freqs), dim=-1)[:, :, None, :]
    return angles.cos(), angles.sin()


class Attention(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, self.heads * d, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=False)
        self.o_proj = nn.Linear(self.heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_eps)
        self.k_norm = RMSNorm(d, cfg.rms_eps)

    def forward(self, x: torch.Tensor, context: torch.Tensor, rope_q: tuple, rope_k: tuple,
                mask: torch.Tensor) -> torch.Tensor:
        """x [N, Q, H] (after input_layernorm), context [N, S, H] -> [N, Q, H]."""
        n, q_len, d = x.shape[0], x.shape[1], self.head_dim
        q = self.q_norm(self.q_proj(x).view(n, q_len, self.heads, d))
        k = self.k_norm(torch.cat([self.k_proj(context), self.k_proj(x)], dim=1)
                        .view(n, -1, self.kv_heads, d))
        v = torch.cat([self.v_proj(context), self.v_proj(x)], dim=1).view(n, -1, self.kv_heads, d)
        q = q * rope_q[0] + rotate_half(q) * rope_q[1]
        k = k * rope_k[0] + rotate_half(k) * rope_k[1]
        group = self.heads // self.kv_heads
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [N, heads, L, D]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1).to(q.dtype)
        out = F.scaled_dot_product_attention(q, k.to(q.dtype), v, attn_mask=mask[:, None])
        return self.o_proj(out.transpose(1, 2).reshape(n, q_len, -1))


class MLP(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        h, inner = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(h, inner, bias=False)
        self.up_proj = nn.Linear(h, inner, bias=False)
        self.down_proj = nn.Linear(inner, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)

    def forward(self, x, context, rope_q, rope_k, mask):
        x = x + self.self_attn(self.input_layernorm(x), context, rope_q, rope_k, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraft(nn.Module):
    """The trainable draft; the target's embedding and LM head stay outside (frozen)."""

    def __init__(self, cfg: DraftConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden_size
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(h, cfg.rms_eps)
        self.fc = nn.Linear(len(cfg.tap_layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, cfg.rms_eps)
        exponent = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim
        self.register_buffer("inv_freq", 1.0 / cfg.rope_theta**exponent, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """HF's init: normal(0, 0.02) matrices, unit norm weights."""
        with torch.no_grad():
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    param.fill_(1.0)
                else:
                    param.normal_(0.0, 0.02)

    def forward(self, taps: torch.Tensor, block_embeddings: torch.Tensor,
                context_positions: torch.Tensor, block_positions: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """taps [N, S, n_taps * H], block_embeddings [N, Q, H], context_positions [N, S],
        block_positions [N, Q], mask [N, Q, S + Q] bool (True = visible) -> [N, Q, H] normed."""
        context = self.hidden_norm(self.fc(taps))
        rope_q = rope_tables(self.inv_freq, block_positions)
        rope_k = rope_tables(self.inv_freq, torch.cat([context_positions, block_positions], 1))
        x = block_embeddings
        for layer in self.layers:
            x = layer(x, context, rope_q, rope_k, mask)
        return self.norm(x)
