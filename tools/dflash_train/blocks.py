"""Blocks for training and evaluation: anchors, block tokens, labels, the packed attention mask.

A sequence of length L with prompt length P has tokens t_0..t_{L-1}. At runtime the pending
token t_p (p >= P) is the anchor: the draft sees the target taps of positions 0..p-1 and the
block [t_p, mask, ..., mask] at positions p..p+B-1, and its row j proposes t_{p+j}. So an anchor
is a position P <= p <= L-2 (at least one label), and row j's label is t_{p+j} when p+j < L.

Packing A anchors of one sequence into one forward (Q = A*B block rows): keys are the S context
positions, then all A blocks; block row (a, i) sees context position s iff s < anchor_a and
block key (a', i') iff a' == a, so each block computes exactly what it would alone.
"""

from __future__ import annotations

import numpy as np
import torch


def sample_anchors(rng: np.random.Generator, starts: np.ndarray, lengths: np.ndarray,
                   count: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` distinct anchors per sequence, uniform over P..L-2 (P its anchor start:
    the prompt's end, or a greedy tail's cut), ascending -> (anchors [N, count] int64, is_valid
    [N, count] bool). Unused slots repeat P and are invalid (their rows are computed, then
    weighted 0)."""
    anchors = np.repeat(np.asarray(starts, np.int64)[:, None], count, axis=1)
    is_valid = np.zeros((len(lengths), count), dtype=bool)
    for row, (start, length) in enumerate(zip(starts, lengths)):
        choices = int(length) - 1 - int(start)  # anchors start..length-2
        assert choices > 0, f"sequence {row}: no anchor (prompt {start}, length {length})"
        chosen = np.sort(rng.choice(choices, size=min(count, choices), replace=False))
        anchors[row, : len(chosen)] = start + chosen
        is_valid[row, : len(chosen)] = True
    return anchors, is_valid


def block_inputs(ids: torch.Tensor, anchors: torch.Tensor, block_size: int,
                 mask_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ids [N, S], anchors [N, A] -> block tokens [N, A*B] ([t_anchor, mask, ...] per block)
    and their positions [N, A*B] (anchor + 0..B-1)."""
    n, count = anchors.shape
    tokens = torch.full((n, count, block_size), mask_token_id, dtype=ids.dtype,
                        device=ids.device)
    tokens[:, :, 0] = ids.gather(1, anchors)
    offsets = torch.arange(block_size, device=ids.device)
    positions = anchors[:, :, None] + offsets
    return tokens.view(n, -1), positions.view(n, -1)


def block_labels(ids: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor,
                 is_valid: torch.Tensor, block_size: int) -> torch.Tensor:
    """[N, A, B-1]: row j's label t_{anchor+j}, or -1 past the sequence or in an invalid block."""
    offsets = torch.arange(1, block_size, device=ids.device)
    where = anchors[:, :, None] + offsets  # [N, A, B-1]
    labels = ids.gather(1, where.clamp(max=ids.shape[1] - 1).view(ids.shape[0], -1))
    labels = labels.view(where.shape)
    keep = (where < lengths[:, None, None]) & is_valid[:, :, None]
    return torch.where(keep, labels, torch.full_like(labels, -1))


def block_mask(anchors: torch.Tensor, context_len: int, block_size: int) -> torch.Tensor:
    """anchors [N, A] -> mask [N, A*B, S + A*B] bool, True where a block row sees the key."""
    n, count = anchors.shape
    device = anchors.device
    sees_context = torch.arange(context_len, device=device) < anchors[:, :, None]  # [N, A, S]
    sees_context = sees_context.repeat_interleave(block_size, dim=1)
    block_of = torch.arange(count * block_size, device=device) // block_size
    same_block = (block_of[:, None] == block_of[None, :]).expand(n, -1, -1)
    return torch.cat([sees_context, same_block], dim=2)


def position_weights(block_size: int, gamma: float, device=None) -> torch.Tensor:
    """[B-1] loss weights of rows 1..B-1: exp(-(j-1)/gamma), z-lab's decay toward early rows
    (a proposal counts only if every earlier one was accepted)."""
    j = torch.arange(1, block_size, device=device, dtype=torch.float32)
    return torch.exp(-(j - 1) / gamma)


def default_gamma(block_size: int) -> float:
    """z-lab's decay constants (7 for block 16, 5 for 10, 4 for 8); about half the block
    otherwise."""
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, max(1.0, block_size / 2 - 1))
