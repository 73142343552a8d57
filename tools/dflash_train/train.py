"""Training: batches of sequences, random anchors, the frozen target's taps, a weighted CE.

One step: N sequences (an epoch is a seeded permutation of the data; `cursor` walks it), A
anchors each drawn from the step's RNG, taps of the frozen target under no_grad, one packed
draft forward, loss = sum_j w_j CE(row j) / sum_j w_j over valid rows j >= 1 with
w_j = exp(-(j-1)/gamma), AdamW with linear warmup then cosine decay to min_lr_ratio * lr,
gradient clipping. With `distill` d > 0 each row's loss is (1 - d) CE(label) + d KL(p || q):
p is the full target's next-token distribution at the row's position (the data is the target's
own continuation, so p is what the label was drawn from), q the draft's. Soft labels carry the
whole distribution where a sampled label carries one draw of it. Everything that decides the
next step (weights, moments, step, epoch, cursor, RNG) is in the checkpoint, so a resumed run
takes the same steps.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from tools.dflash_train import blocks
from tools.dflash_train.data import Sequences
from tools.dflash_train.model import DFlashDraft
from tools.dflash_train.target import target_taps_and_final


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 6e-4
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    batch: int = 32  # sequences per step
    anchors: int = 64  # blocks per sequence per step
    gamma: float = 7.0
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    moments_dtype: str = "bfloat16"
    distill: float = 0.0  # weight of KL(target || draft) against the labels' CE, 0..1

    def __post_init__(self) -> None:
        if not 0.0 <= self.distill <= 1.0:
            raise ValueError(f"distill {self.distill}: expected a weight in 0..1")


def learning_rate(cfg: TrainConfig, step: int, total_steps: int) -> float:
    """Linear warmup over warmup_steps, then cosine from lr to min_lr_ratio * lr at
    total_steps (flat after); total_steps 0 (not planned yet) holds the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if total_steps == 0:
        return cfg.lr
    span = max(1, total_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.min_lr_ratio * cfg.lr
    return floor + (cfg.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


@dataclass
class TrainState:
    """Where training stands; JSON round-trips it (the RNG as numpy's PCG64 state)."""

    seed: int
    total_steps: int = 0  # the schedule's length; 0 = not planned yet
    step: int = 0
    epoch: int = 0
    cursor: int = 0
    sequences: int = 0
    tokens: int = 0
    seconds: float = 0.0
    data_fingerprint: str = ""
    rng: np.random.Generator = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.rng is None:
            self.rng = np.random.default_rng([self.seed, 1])

    def to_json(self) -> dict:
        values = {k: v for k, v in asdict(self).items() if k != "rng"}
        return {**values, "rng": self.rng.bit_generator.state}

    @classmethod
    def from_json(cls, values: dict) -> TrainState:
        values = dict(values)
        rng = np.random.default_rng()
        rng.bit_generator.state = values.pop("rng")
        return cls(**values, rng=rng)

    def next_batch(self, num_sequences: int, size: int) -> np.ndarray:
        """The next `size` indices of this epoch's permutation (a fresh epoch when fewer are
        left); the permutation is a function of (seed, epoch), so resuming needs no list."""
        size = min(size, num_sequences)
        if self.cursor + size > num_sequences:
            self.epoch, self.cursor = self.epoch + 1, 0
        order = np.random.default_rng([self.seed, 0, self.epoch]).permutation(num_sequences)
        batch = order[self.cursor: self.cursor + size]
        self.cursor += size
        return batch


def usable(data: Sequences) -> np.ndarray:
    """Indices of sequences with at least one anchor (>= 2 tokens from the anchor start on)."""
    return np.flatnonzero(data.lengths - data.anchor_starts >= 2)


def collate(data: Sequences, indices: np.ndarray, device) -> tuple[torch.Tensor, ...]:
    """ids [N, S] right-padded with 0, lengths [N], anchor starts [N] (numpy and torch)."""
    lengths = data.lengths[indices]
    ids = np.zeros((len(indices), int(lengths.max())), dtype=np.int64)
    for row, i in enumerate(indices):
        ids[row, : lengths[row]] = data.sequence(int(i))
    return torch.from_numpy(ids).to(device), lengths, data.anchor_starts[indices]


class Trainer:
    """The draft, its optimizer and the frozen target pieces it trains against."""

    def __init__(self, draft: DFlashDraft, target, embed: torch.Tensor, lm_head: torch.Tensor,
                 cfg: TrainConfig, device: torch.device, amp: bool) -> None:
        self.draft, self.target, self.cfg, self.device = draft, target, cfg, device
        self.embed, self.lm_head = embed, lm_head  # [V, H] each, frozen
        decay = [p for n, p in draft.named_parameters() if p.ndim == 2]
        no_decay = [p for n, p in draft.named_parameters() if p.ndim < 2]
        fused = device.type == "cuda"
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95),
            eps=1e-8, fused=fused or None)
        self.weights = blocks.position_weights(draft.cfg.block_size, cfg.gamma, device)
        self.amp = amp

    def autocast(self):
        if not self.amp:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def step(self, data: Sequences, indices: np.ndarray, state: TrainState) -> dict:
        """One optimizer step on the sequences `indices`; returns its metrics."""
        ids, lengths, starts = collate(data, indices, self.device)
        anchors, is_valid = blocks.sample_anchors(state.rng, starts, lengths,
                                                  self.cfg.anchors)
        with self.autocast():
            taps, final = target_taps_and_final(self.target, ids, self.draft.cfg.tap_layer_ids)
        lr = learning_rate(self.cfg, state.step, state.total_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss, metrics = self.loss(ids, torch.from_numpy(lengths).to(self.device), taps,
                                  torch.from_numpy(anchors).to(self.device),
                                  torch.from_numpy(is_valid).to(self.device),
                                  final if self.cfg.distill > 0 else None)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.draft.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        state.step += 1
        state.sequences += len(indices)
        state.tokens += int(lengths.sum())
        return {**metrics, "lr": lr, "grad_norm": float(norm)}

    def hidden(self, ids, taps, anchors) -> torch.Tensor:
        with self.autocast():
            return block_hidden(self.draft, self.embed, ids, taps, anchors)

    def loss(self, ids, lengths, taps, anchors, is_valid, final=None
             ) -> tuple[torch.Tensor, dict]:
        """final: the full target's normed output [N, S, H] (with distill > 0)."""
        labels = blocks.block_labels(ids, lengths, anchors, is_valid, self.draft.cfg.block_size)
        rows = self.hidden(ids, taps, anchors)[:, :, 1:]  # [N, A, B-1, H]
        valid = labels >= 0
        with self.autocast():
            logits = rows[valid] @ self.lm_head.T  # [R, V]
        log_q = F.log_softmax(logits.float(), -1)
        ce = F.nll_loss(log_q, labels[valid], reduction="none")
        per_row, extra = ce, {}
        if final is not None:
            log_p = target_log_probs(final, self.lm_head, anchors, valid, self.autocast)
            kl = (log_p.exp() * (log_p - log_q)).sum(-1)
            per_row = (1 - self.cfg.distill) * ce + self.cfg.distill * kl
            agree = torch.zeros_like(valid)
            agree[valid] = logits.argmax(-1) == log_p.argmax(-1)
            extra = {"kl": float(kl.mean()),
                     "tau_target": block_metrics(ce.mean(), ce, agree, valid)["tau"]}
        weights = self.weights.expand_as(labels)[valid]
        loss = (per_row * weights).sum() / weights.sum()
        correct = torch.zeros_like(valid)
        correct[valid] = logits.argmax(-1) == labels[valid]
        return loss, {**block_metrics(loss, ce, correct, valid), **extra}


def target_log_probs(final: torch.Tensor, lm_head: torch.Tensor, anchors: torch.Tensor,
                     valid: torch.Tensor, autocast) -> torch.Tensor:
    """The target's log-distribution of each valid block row's token [R, V] (float32): row j
    of the block at anchor p is token p + j, which the target predicts from position p + j - 1
    (final [N, S, H], anchors [N, A], valid [N, A, B-1])."""
    offsets = torch.arange(valid.shape[-1], device=final.device)
    where = (anchors[:, :, None] + offsets).clamp(max=final.shape[1] - 1)  # p + j - 1
    hidden = final.gather(1, where.view(len(final), -1, 1).expand(-1, -1, final.shape[-1]))
    hidden = hidden.view(*where.shape, -1)[valid]
    with torch.no_grad(), autocast():
        logits = hidden @ lm_head.T
    return F.log_softmax(logits.float(), -1)


def block_hidden(draft: DFlashDraft, embed: torch.Tensor, ids: torch.Tensor, taps: torch.Tensor,
                 anchors: torch.Tensor) -> torch.Tensor:
    """The draft's normed block rows [N, A, B, H] for anchors [N, A] of ids [N, S] whose taps
    [N, S, n_taps * H] the target gave; embed [V, H] is the target's."""
    cfg = draft.cfg
    tokens, positions = blocks.block_inputs(ids, anchors, cfg.block_size, cfg.mask_token_id)
    mask = blocks.block_mask(anchors, ids.shape[1], cfg.block_size)
    context_positions = torch.arange(ids.shape[1], device=ids.device).expand(len(ids), -1)
    out = draft(taps, embed[tokens], context_positions, positions, mask)
    return out.view(*anchors.shape, cfg.block_size, -1)


@torch.no_grad()
def block_metrics(loss, ce, correct: torch.Tensor, valid: torch.Tensor) -> dict:
    """acc_j: how often row j's argmax is its label; tau: 1 + the mean count of leading correct
    rows over blocks with every label present (for greedy data this is the acceptance a
    speculative cycle at that anchor gets)."""
    per_row = correct.sum((0, 1)) / valid.sum((0, 1)).clamp(min=1)
    full = valid.all(-1)
    leading = correct.long().cumprod(-1).sum(-1)[full]
    tau = 1.0 + float(leading.float().mean()) if leading.numel() else float("nan")
    return {"loss": float(loss), "ce": float(ce.mean()), "tau": tau,
            "acc": [round(float(a), 4) for a in per_row]}
