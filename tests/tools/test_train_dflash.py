"""tools/train_dflash.py on CPU: the draft against the z-lab reference, packed blocks against
separate ones, sampling against cellspec's, and a tiny end-to-end run (generate -> train ->
resume -> eval -> export) on a tiny random Llama with a real tokenizer and chat template."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tools.dflash_train import blocks  # noqa: E402 (after the importorskips)
from tools.dflash_train.config import DraftConfig, spread_taps  # noqa: E402
from tools.dflash_train.evaluate import walk_cycles  # noqa: E402
from tools.dflash_train.model import DFlashDraft  # noqa: E402
from tools.dflash_train.prompts import make_prompts, split  # noqa: E402
from tools.dflash_train.sampling import positional_uniforms, sample_rows  # noqa: E402

TINY_DRAFT = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                  intermediate_size=96, rms_eps=1e-6, rope_theta=10000.0,
                  max_position_embeddings=512, vocab_size=256, block_size=5, mask_token_id=255,
                  tap_layer_ids=(0, 2), num_target_layers=4)
RELATIVE = 1e-5  # float32 rounding of a few layers, relative to the largest logit


def random_reference(cfg: DraftConfig, seed: int = 0):
    from tests.reference.dflash_ref import DFlashDraftRef, make_config

    torch.manual_seed(seed)
    ref = DFlashDraftRef(make_config(cfg.zlab_config()), len(cfg.tap_layer_ids)).eval()
    with torch.no_grad():
        for name, param in ref.named_parameters():
            param.copy_((1.0 if "norm" in name else 0.0) + 0.15 * torch.randn_like(param))
    return ref


def run_blocks(draft, embed, taps, ids, anchors):
    """The draft's rows for anchors [N, A] over context taps [N, S, ...]; ids [N, >= S] hold the
    anchor tokens."""
    cfg = draft.cfg
    tokens, positions = blocks.block_inputs(ids, anchors, cfg.block_size, cfg.mask_token_id)
    mask = blocks.block_mask(anchors, taps.shape[1], cfg.block_size)
    context = torch.arange(taps.shape[1]).expand(len(ids), -1)
    with torch.no_grad():
        return draft(taps, embed[tokens], context, positions, mask)


def test_draft_equals_zlab_reference_on_one_block():
    from tests.reference.dflash_ref import draft_logits

    cfg = DraftConfig(**TINY_DRAFT)
    ref = random_reference(cfg)
    draft = DFlashDraft(cfg)
    draft.load_state_dict(ref.state_dict(), strict=True)  # z-lab's names, one to one
    embed, head = torch.randn(256, 64), torch.randn(256, 64)
    taps, ids = torch.randn(1, 12, 128), torch.randint(0, 250, (1, 12))
    anchor = 7
    expected = draft_logits(ref, embed, head, taps[0, :anchor],
                            torch.tensor([int(ids[0, anchor])] + [255] * 4),
                            torch.arange(anchor + 5))
    got = run_blocks(draft, embed, taps, ids, torch.tensor([[anchor]]))[0] @ head.T
    assert (got - expected).abs().max() <= RELATIVE * expected.abs().max()


def test_packed_anchors_equal_each_block_alone():
    cfg = DraftConfig(**TINY_DRAFT)
    draft = DFlashDraft(cfg)
    draft.load_state_dict(random_reference(cfg, seed=1).state_dict())
    embed = torch.randn(256, 64)
    taps, ids = torch.randn(2, 14, 128), torch.randint(0, 250, (2, 14))
    anchors = torch.tensor([[2, 6, 11], [9, 3, 3]])  # any order, repeats allowed
    packed = run_blocks(draft, embed, taps, ids, anchors).view(2, 3, 5, 64)
    for n in range(2):
        for a, anchor in enumerate(anchors[n].tolist()):
            alone = run_blocks(draft, embed, taps[n:n + 1, :anchor], ids[n:n + 1, :anchor + 1],
                               torch.tensor([[anchor]]))[0]
            assert (packed[n, a] - alone).abs().max() <= RELATIVE * alone.abs().max()


def test_block_labels_and_mask_by_hand():
    ids = torch.tensor([[10, 11, 12, 13, 14, 0]])
    anchors, valid = torch.tensor([[2, 4]]), torch.tensor([[True, True]])
    labels = blocks.block_labels(ids, torch.tensor([5]), anchors, valid, 4)
    assert labels.tolist() == [[[13, 14, -1], [-1, -1, -1]]]
    tokens, positions = blocks.block_inputs(ids, anchors, 4, 99)
    assert tokens.tolist() == [[12, 99, 99, 99, 14, 99, 99, 99]]
    assert positions.tolist() == [[2, 3, 4, 5, 4, 5, 6, 7]]
    mask = blocks.block_mask(anchors, 6, 4)[0].int()
    assert mask[0].tolist() == [1, 1, 0, 0, 0, 0] + [1] * 4 + [0] * 4
    assert mask[7].tolist() == [1, 1, 1, 1, 0, 0] + [0] * 4 + [1] * 4


def test_anchors_are_distinct_answer_positions():
    rng = np.random.default_rng(0)
    anchors, valid = blocks.sample_anchors(rng, np.array([3, 5]), np.array([9, 8]), 4)
    assert valid.tolist() == [[True] * 4, [True, True, False, False]]
    assert all(3 <= a <= 7 for a in anchors[0]) and len(set(anchors[0])) == 4
    assert sorted(anchors[1][:2]) == [5, 6]


def test_sampling_equals_cellspec_rule():
    from cellspec.runtime.sampling import positional_uniform, sample_token

    rng = np.random.default_rng(0)
    seeds, positions = rng.integers(0, 2**62, 200), rng.integers(0, 4096, 200)
    uniforms = positional_uniforms(seeds, positions)
    assert uniforms.tolist() == [positional_uniform(int(s), int(p))
                                 for s, p in zip(seeds, positions)]
    logits = (3 * rng.standard_normal((200, 300))).astype(np.float32)
    logits[:20, :4] = 4.0  # ties: the lower id first
    for temperature in (0.0, 0.7):
        got = sample_rows(torch.from_numpy(logits), temperature, uniforms).tolist()
        assert got == [sample_token(row, temperature, 1.0, 0, u)
                       for row, u in zip(logits, uniforms)]


def test_prompt_set_is_deterministic_diverse_and_split():
    prompts = make_prompts()
    assert prompts == make_prompts()
    assert len(prompts) > 4000 and len({p.text for p in prompts}) == len(prompts)
    train, held_out = split(prompts)
    assert 0.03 < len(held_out) / len(prompts) < 0.07
    assert {p.category for p in held_out} == {p.category for p in prompts}  # all 15 categories
    assert len({p.category for p in prompts}) == 15


def test_benchmarks_take_the_held_out_prompts_categories_in_turn():
    from tools.dflash_train.prompts import CATEGORIES, held_out_texts

    held_out = split(make_prompts())[1]
    texts = held_out_texts(len(held_out))
    assert sorted(texts) == sorted(p.text for p in held_out)  # every held-out prompt, only them
    category = {p.text: p.category for p in held_out}
    assert [category[t] for t in texts[:15]] == list(CATEGORIES)  # each category's first, in turn
    assert held_out_texts(3) == texts[:3]
    with pytest.raises(SystemExit, match=f"holds {len(held_out)}"):
        held_out_texts(len(held_out) + 1)


def test_walk_cycles_by_hand():
    accepted = np.zeros(20, dtype=int)
    accepted[[5, 8, 12]] = [2, 3, 4]  # answer at 5..15: cycles anchored at 5, 8, 12; 17 > 14
    assert walk_cycles(accepted, 5, 16) == (3, 9)
    assert walk_cycles(np.zeros(20, dtype=int), 5, 16) == (10, 0)


def test_spread_taps_is_zlab_choice():
    assert spread_taps(36, 5) == (1, 9, 17, 25, 33)
    assert spread_taps(30, 3) == (1, 14, 27)




def test_learning_rate_warms_up_holds_until_planned_then_decays():
    from tools.dflash_train.train import TrainConfig, learning_rate

    cfg = TrainConfig(lr=1e-3, min_lr_ratio=0.1, warmup_steps=10)
    assert learning_rate(cfg, 0, 100) == pytest.approx(1e-4)
    assert learning_rate(cfg, 9, 100) == pytest.approx(1e-3)
    assert learning_rate(cfg, 50, 0) == 1e-3  # total_steps 0: the schedule is not planned yet
    assert learning_rate(cfg, 55, 100) == pytest.approx(0.55e-3)  # half way down the cosine
    assert learning_rate(cfg, 100, 100) == pytest.approx(1e-4)
    assert learning_rate(cfg, 150, 100) == pytest.approx(1e-4)


class _FakeClock:
    """`time` as the training loop sees it: time() advances only when a step says so."""

    def __init__(self) -> None:
        import time

        self.now, self.strftime = 1000.0, time.strftime

    def time(self) -> float:
        return self.now


class _TimedTrainer:
    """Stands in for Trainer: each step takes `durations[i]` seconds of the fake clock."""

    def __init__(self, clock: _FakeClock, durations, warmup_steps: int) -> None:
        from tools.dflash_train.train import TrainConfig

        self.clock, self.durations = clock, list(durations)
        self.cfg = TrainConfig(batch=2, warmup_steps=warmup_steps)

    def step(self, data, batch, state) -> dict:
        self.clock.now += self.durations[min(state.step, len(self.durations) - 1)]
        state.step += 1
        return {"loss": 1.0, "ce": 1.0, "tau": 1.0, "lr": 1e-3, "grad_norm": 1.0,
                "acc": [0.5, 0.25]}


@pytest.mark.parametrize(("warmup_steps", "expected"), [
    (100, 100 + (300 - 46 - 10) * 10),  # planned at step 100 (46 s in), at 0.1 s a step
    (10, 13 + (300 - 13 - 10)),  # planned after calibration (13 s in), at 1 s a step
])
def test_the_schedule_is_planned_after_the_warm_up_from_recent_steps(
        monkeypatch, tmp_path, warmup_steps, expected):
    """A GPU's first steps are slow for longer than the settle steps: 1 s each for 40 steps,
    then 0.1 s. With a warm-up of 100 steps the schedule is fitted when it ends, from the recent
    steps' 0.1 s, so it fills the 300 s budget with 2,540 steps (planning at step 13 from the
    1 s steps gave 290, the bug seen on the H200); with a warm-up of 10, at calibration."""
    from tools.dflash_train import data as data_io
    from tools.dflash_train import progress, session
    from tools.dflash_train.train import TrainState

    clock = _FakeClock()
    monkeypatch.setattr(session, "time", clock)
    monkeypatch.setattr(progress, "time", clock)
    monkeypatch.setattr(session, "save", lambda *args: 0)
    monkeypatch.setattr(session, "say", lambda *args: None)
    rng = np.random.default_rng(0)
    data = data_io.append(data_io.empty({}), [rng.integers(5, 200, 12) for _ in range(8)],
                          [4] * 8, list(range(8)), [0] * 8, [0] * 8, [True] * 8)
    trainer = _TimedTrainer(clock, [1.0] * 40 + [0.1], warmup_steps)
    log = session.RunLog(tmp_path, "train", {})
    limits = session.RunLimits(max_seconds=400.0, plan_seconds=300.0, run_steps=120)
    state = session.run_training(trainer, TrainState(seed=0), data, tmp_path / "ckpt", log,
                                 limits)
    assert state.step == 120 and abs(state.total_steps - expected) <= 1  # float sums of 0.1
    assert session.fit_total_steps(13, 13.0, 300.0, 1.0) == 13 + 277
