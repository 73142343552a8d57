"""A training run: build or resume, step until the schedule or the time budget ends, checkpoint.

The schedule's length (`total_steps`) is given, taken from the resumed checkpoint, or (0) fitted
to `plan_seconds` when the learning-rate warm-up ends (the cosine starts there; before it the
schedule does not need its length) and at least CALIBRATION_STEPS steps have been timed: total
= steps that fit at the median time of the recent steps. A GPU's first steps are slow (kernel
autotuning, allocator growth, every new batch shape) for longer than SETTLE_STEPS; planning
from them once fitted a few hundred steps into a budget for thousands. It is saved with the
checkpoint, so a resumed run continues the same cosine. A run stops before a step
that would overrun `max_seconds` (keeping room for the final checkpoint), and writes a
checkpoint every `save_every` seconds and at the end.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from tools.dflash_train import checkpoint as ckpt_io
from tools.dflash_train.config import DraftConfig
from tools.dflash_train.data import Sequences
from tools.dflash_train.model import DFlashDraft
from tools.dflash_train.progress import Progress, RunLog, say
from tools.dflash_train.target import build_target
from tools.dflash_train.train import TrainConfig, Trainer, TrainState, usable

CALIBRATION_STEPS = 10  # timed after SETTLE_STEPS, before the schedule is fitted
SETTLE_STEPS = 3  # first steps: allocator and kernel warm-up, not timed


@dataclass(frozen=True)
class RunLimits:
    max_seconds: float | None = None  # this run's wall-clock budget
    plan_seconds: float | None = None  # what total_steps = 0 fits the schedule to
    run_steps: int | None = None  # stop after this many steps in this run
    save_every: float = 120.0
    shard_bytes: int = ckpt_io.DEFAULT_SHARD_BYTES


def make_trainer(target_ckpt, draft_cfg: DraftConfig, train_cfg: TrainConfig,
                 device: torch.device, amp: bool) -> Trainer:
    """A fresh draft (seeded init) and the target truncated after its last tap (whole when it
    gives soft labels)."""
    depth = None if train_cfg.distill > 0 else max(draft_cfg.tap_layer_ids) + 1
    target = build_target(target_ckpt, device, num_layers=depth)  # whole for soft labels
    torch.manual_seed(train_cfg.seed)
    draft = DFlashDraft(draft_cfg).to(device)
    return Trainer(draft, target, target.model.embed_tokens.weight, target.lm_head.weight,
                   train_cfg, device, amp)


def resume_trainer(target_ckpt, folder: Path, overrides: dict, device: torch.device,
                   amp: bool) -> tuple[Trainer, TrainState]:
    """The trainer and state saved in `folder`; `overrides` replace TrainConfig fields."""
    meta, tensors = ckpt_io.load_checkpoint(folder)
    draft_cfg = DraftConfig(**meta["draft"])
    train_cfg = TrainConfig(**{**meta["train"], **overrides})
    trainer = make_trainer(target_ckpt, draft_cfg, train_cfg, device, amp)
    trainer.draft.load_state_dict(ckpt_io.model_state(tensors))
    state = TrainState.from_json(meta["state"])
    ckpt_io.restore_optimizer(trainer.optimizer, trainer.draft, tensors, state.step)
    say("train", f"resumed {folder} at step {state.step}/{state.total_steps}, epoch "
        f"{state.epoch}, {state.sequences} sequences seen")
    return trainer, state


def save(trainer: Trainer, state: TrainState, folder: Path, limits: RunLimits) -> int:
    meta = {"draft": trainer.draft.cfg.to_dict(), "train": asdict(trainer.cfg),
            "state": state.to_json()}
    return ckpt_io.save_checkpoint(folder, trainer.draft, trainer.optimizer, meta,
                                   trainer.cfg.moments_dtype, limits.shard_bytes)


def run_training(trainer: Trainer, state: TrainState, data: Sequences, folder: Path,
                 log: RunLog, limits: RunLimits) -> TrainState:
    """Train until total_steps, run_steps or max_seconds; checkpoint into `folder`."""
    indices = usable(data)
    if state.data_fingerprint and state.data_fingerprint != data.fingerprint():
        say("train", "the data differs from the checkpoint's: starting a new epoch over it")
        state.epoch, state.cursor = state.epoch + 1, 0
    state.data_fingerprint = data.fingerprint()
    progress = Progress(state.total_steps - state.step if state.total_steps else 0,
                        limits.max_seconds)
    clock = _Clock()
    window: list[dict] = []
    done = 0
    while _may_step(state, limits, done, progress.elapsed(), clock):
        tick = time.time()
        metrics = trainer.step(data, indices[state.next_batch(len(indices), trainer.cfg.batch)],
                               state)
        clock.add(done, time.time() - tick)
        state.seconds += time.time() - tick
        done += 1
        window.append(metrics)
        if (state.total_steps == 0 and done >= SETTLE_STEPS + CALIBRATION_STEPS
                and state.step >= trainer.cfg.warmup_steps):
            _plan(state, limits, progress.elapsed(), clock.recent_seconds)
            progress.total = state.total_steps - state.step + done
        if progress.due() or not _may_step(state, limits, done, progress.elapsed(), clock):
            _report(log, state, window, progress, done, clock)
            window = []
        if time.time() - clock.last_save > limits.save_every:
            clock.save_seconds = _timed_save(trainer, state, folder, limits, clock)
    if window:
        _report(log, state, window, progress, done, clock)
    size = save(trainer, state, folder, limits)
    say("train", f"step {state.step}/{state.total_steps}: checkpoint {folder} "
        f"({size / 1e6:.1f} MB)")
    log.finish(step=state.step, total_steps=state.total_steps, epoch=state.epoch,
               sequences=state.sequences, tokens=state.tokens, checkpoint_bytes=size,
               step_seconds=clock.step_seconds)
    return state


class _Clock:
    """Step and checkpoint timings of this run."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.save_seconds = 5.0
        self.last_save = time.time()

    def add(self, index: int, seconds: float) -> None:
        if index >= SETTLE_STEPS:
            self.times.append(seconds)

    @property
    def step_seconds(self) -> float:
        return float(np.mean(self.times[-50:])) if self.times else 0.0

    @property
    def recent_seconds(self) -> float:
        """The median of the last 50 timed steps: what a step costs from now on."""
        return float(np.median(self.times[-50:])) if self.times else 0.0


def _may_step(state: TrainState, limits: RunLimits, done: int, elapsed: float,
              clock: _Clock) -> bool:
    if state.total_steps and state.step >= state.total_steps:
        return False
    if limits.run_steps is not None and done >= limits.run_steps:
        return False
    if limits.max_seconds is None:
        return state.total_steps > 0
    return elapsed + 1.5 * clock.step_seconds + clock.save_seconds < limits.max_seconds


def _plan(state: TrainState, limits: RunLimits, elapsed: float, step_seconds: float) -> None:
    budget = limits.plan_seconds or limits.max_seconds
    assert budget, "total_steps 0 needs a time budget (plan_seconds or max_seconds)"
    state.total_steps = fit_total_steps(state.step, elapsed, budget, step_seconds)
    say("train", f"{step_seconds * 1000:.0f} ms a step: schedule planned for "
        f"{state.total_steps} steps")


def fit_total_steps(step: int, elapsed: float, budget: float, step_seconds: float) -> int:
    """The schedule's length: the steps done plus those that fit in what is left of `budget`
    (10 s kept for checkpoints) at `step_seconds` each; at least one more."""
    return step + max(1, int((budget - elapsed - 10.0) / max(step_seconds, 1e-9)))


def _timed_save(trainer, state, folder, limits, clock) -> float:
    tick = time.time()
    save(trainer, state, folder, limits)
    clock.last_save = time.time()
    return time.time() - tick


def _report(log, state, window, progress, done, clock) -> None:
    mean = {key: float(np.nanmean([m[key] for m in window])) for key in
            ("loss", "ce", "tau", "lr", "grad_norm", "kl", "tau_target") if key in window[0]}
    acc = np.mean([m["acc"] for m in window], axis=0).round(3).tolist()
    rate = state.tokens / max(state.seconds, 1e-9)
    say("train", f"step {state.step}/{state.total_steps or '?'} loss {mean['loss']:.3f} "
        f"tau~{mean['tau']:.2f} acc1 {acc[0]:.3f} lr {mean['lr']:.2e} "
        + (f"kl {mean['kl']:.3f} tau_target~{mean['tau_target']:.2f} " if "kl" in mean else "")
        + f"{clock.step_seconds * 1000:.0f} ms/step {rate:.0f} tok/s "
        f"ETA {progress.eta(done):.0f} s")
    log.event(step=state.step, epoch=state.epoch, **{k: round(v, 5) for k, v in mean.items()},
              acc=acc, step_seconds=round(clock.step_seconds, 4))
