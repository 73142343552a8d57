"""tools/train_dflash.py on CPU: the draft against the z-lab reference, packed blocks against
separate ones, sampling against cellspec's, and a tiny end-to-end run (generate -> train ->
resume -> eval -> export) on a tiny random Llama with a real tokenizer and chat template."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tools.dflash_train import blocks  # noqa: E402 (after the importorskips)
from tools.dflash_train import checkpoint as ckpt_io  # noqa: E402
from tools.dflash_train import data as data_io  # noqa: E402
from tools.dflash_train.cli import run  # noqa: E402
from tools.dflash_train.config import DraftConfig, spread_taps  # noqa: E402
from tools.dflash_train.evaluate import speculative_decode, walk_cycles  # noqa: E402
from tools.dflash_train.model import DFlashDraft  # noqa: E402
from tools.dflash_train.prompts import make_prompts, split  # noqa: E402
from tools.dflash_train.sampling import positional_uniforms, sample_rows  # noqa: E402

TINY_DRAFT = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                  intermediate_size=96, rms_eps=1e-6, rope_theta=10000.0,
                  max_position_embeddings=512, vocab_size=256, block_size=5, mask_token_id=255,
                  tap_layer_ids=(0, 2), num_target_layers=4)
RELATIVE = 1e-5  # float32 rounding of a few layers, relative to the largest logit


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: two OpenMP threads on a loaded 2-core machine cost 50x in barrier waits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


def test_walk_cycles_by_hand():
    accepted = np.zeros(20, dtype=int)
    accepted[[5, 8, 12]] = [2, 3, 4]  # answer at 5..15: cycles anchored at 5, 8, 12; 17 > 14
    assert walk_cycles(accepted, 5, 16) == (3, 9)
    assert walk_cycles(np.zeros(20, dtype=int), 5, 16) == (10, 0)


def test_spread_taps_is_zlab_choice():
    assert spread_taps(36, 5) == (1, 9, 17, 25, 33)
    assert spread_taps(30, 3) == (1, 14, 27)


# -- a tiny end-to-end run ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory) -> Path:
    """A 4-layer Llama (hidden 64) with tests/tiny_chat's tokenizer and chat template."""
    import transformers

    from tests.tiny_chat import CHAT_TEMPLATE, make_tokenizer

    folder = tmp_path_factory.mktemp("tiny-target")
    tokenizer = make_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=0,
        eos_token_id=[1, 3])
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # larger than HF's init, so greedy answers are not near-ties
        for name, param in model.named_parameters():
            param.copy_(1.0 + 0.2 * torch.randn_like(param) if "norm" in name
                        else 0.3 * torch.randn_like(param))
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return folder


COMMON = ["--device", "cpu", "--per-category", "40"]
DRAFT = ["--layers", "2", "--intermediate-size", "96", "--block-size", "5", "--taps", "0,2",
         "--mask-token-id", "300", "--batch", "4", "--anchors-per-seq", "6", "--save-every",
         "1000"]


@pytest.fixture(scope="module")
def generated(tiny_target, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    run(["generate", "--target", str(tiny_target), "--out", str(out), *COMMON, "--limit", "12",
         "--samples", "1", "--max-new-tokens", "10", "--gen-batch", "8"])
    return out


def test_generate_writes_chat_formatted_training_data(generated, tiny_target):
    from tools.dflash_train.target import chat_tokenizer, load_target_checkpoint

    data = data_io.load(generated / "data.npz")
    assert len(data) == 24 and sorted(set(data.sample_ids.tolist())) == [0, 1]
    prompts = make_prompts(0, 40)
    assert not any(prompts[i].is_held_out for i in data.prompt_ids)
    tokenizer = chat_tokenizer(load_target_checkpoint(tiny_target))
    for i in range(len(data)):
        prompt = tokenizer.encode(prompts[data.prompt_ids[i]].text, chat=True)
        assert data.sequence(i)[: data.prompt_lens[i]].tolist() == prompt
        answer = data.sequence(i)[data.prompt_lens[i]:].tolist()
        assert 1 <= len(answer) <= 10 and data.is_finished[i] == (answer[-1] in (1, 3))
    log = json.loads((generated / "log.json").read_text())
    assert log["generate"][0]["sequences"] == 24


def train(out: Path, generated: Path, target: Path, *extra: str) -> dict:
    run(["train", "--target", str(target), "--out", str(out), "--data",
         str(generated / "data.npz"), *COMMON, *DRAFT, *extra])
    return ckpt_io.load_checkpoint(out / "ckpt")


def test_resume_continues_the_same_steps(generated, tiny_target, tmp_path):
    exact = ["--moments-dtype", "float32"]  # bf16 moments would round once at the resume
    straight_meta, straight = train(tmp_path / "a", generated, tiny_target, "--steps", "4", *exact)
    train(tmp_path / "b", generated, tiny_target, "--steps", "4", "--run-steps", "2", *exact)
    half_meta, _ = ckpt_io.load_checkpoint(tmp_path / "b" / "ckpt")
    assert half_meta["state"]["step"] == 2
    resumed_meta, resumed = train(tmp_path / "c", generated, tiny_target, "--resume",
                                  str(tmp_path / "b" / "ckpt"))
    assert resumed_meta["state"]["step"] == straight_meta["state"]["step"] == 4
    assert resumed_meta["state"]["rng"] == straight_meta["state"]["rng"]
    assert straight.keys() == resumed.keys()
    assert len(straight) == 3 * len(DFlashDraft(DraftConfig(**TINY_DRAFT)).state_dict())
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name


@pytest.fixture(scope="module")
def overfit(generated, tiny_target):
    """A draft trained 60 steps on 8 of the generated sequences, and its losses."""
    from tools.dflash_train.cli import make_parser
    from tools.dflash_train.commands import draft_config
    from tools.dflash_train.session import make_trainer
    from tools.dflash_train.target import load_target_checkpoint
    from tools.dflash_train.train import TrainConfig, TrainState

    args = make_parser().parse_args(["train", "--out", "unused", *DRAFT])
    ckpt = load_target_checkpoint(tiny_target)
    trainer = make_trainer(ckpt, draft_config(args, ckpt),
                           TrainConfig(lr=3e-3, warmup_steps=5, batch=8, anchors=6, gamma=4.0),
                           torch.device("cpu"), amp=False)
    data = data_io.load(generated / "data.npz")
    state = TrainState(seed=0, total_steps=60)
    losses = [trainer.step(data, np.arange(8), state)["loss"] for _ in range(60)]
    return trainer.draft.eval(), losses


def test_loss_falls_when_overfitting(overfit):
    losses = overfit[1]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses


def test_eval_cycles_equal_the_literal_speculative_loop(overfit, generated, tiny_target):
    from tools.dflash_train.evaluate import accepted_counts
    from tools.dflash_train.generate import decode_batch
    from tools.dflash_train.target import build_target, load_target_checkpoint

    draft = overfit[0]
    target = build_target(load_target_checkpoint(tiny_target), "cpu")
    data = data_io.load(generated / "data.npz")
    greedy = np.flatnonzero(data.sample_ids == 0)[:8]
    prompts = [data.sequence(i)[: data.prompt_lens[i]].tolist() for i in greedy]
    streams = decode_batch(target, prompts, 10, (1, 3), 0.0, [0] * len(prompts))
    total = 0
    for prompt, (answer, _) in zip(prompts, streams):
        literal = speculative_decode(draft, target, prompt, 10, (1, 3), n_draft=4)
        ids = torch.tensor([prompt + answer])
        accepted = accepted_counts(draft, target, target.model.embed_tokens.weight,
                                   target.lm_head.weight, ids, np.array([ids.shape[1]]),
                                   np.array([len(prompt)]), 4)
        walked = walk_cycles(accepted[0], len(prompt), ids.shape[1])
        assert literal == (answer, *walked)
        total += walked[1]
    assert total > 0  # the trained draft gets proposals accepted: the check is not vacuous


def test_export_is_accepted_by_cellspec(overfit, tiny_target, tmp_path):
    from cellspec.export import ExportConfig, export
    from tests.reference.dflash_ref import DFlashDraftRef, make_config

    draft = overfit[0]
    files = ckpt_io.export_draft(tmp_path / "draft", draft.cfg, draft.state_dict())
    assert [f.name for f in files] == ["config.json", "model.safetensors"]
    manifest = export(tiny_target, tmp_path / "artifact",
                      ExportConfig(max_context=512, max_cells=1024), progress=False,
                      draft=tmp_path / "draft")
    assert manifest.draft.block_size == 5 and manifest.draft.mask_token_id == 300
    config = json.loads((tmp_path / "draft" / "config.json").read_text())
    from safetensors.torch import load_file

    ref = DFlashDraftRef(make_config(config), 2)
    ref.load_state_dict({k: v.float() for k, v in
                         load_file(str(tmp_path / "draft" / "model.safetensors")).items()})
    for name, tensor in draft.state_dict().items():  # float16 of the trained weights
        assert torch.equal(ref.state_dict()[name], tensor.half().float()), name


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_cellspec_runtime_commits_the_cycles_eval_counts(overfit, generated, tiny_target,
                                                         tmp_path, temperature):
    """The exported draft in cellspec's DFlash runtime: same cycles and accepted proposals as
    the torch evaluation, greedy and sampled (session seeds EVAL_SEED + i)."""
    from cellspec import LLM, SamplingParams
    from cellspec.export import ExportConfig, export
    from tools.dflash_train.evaluate import EVAL_SEED, evaluate
    from tools.dflash_train.target import build_target, chat_tokenizer, load_target_checkpoint

    draft = overfit[0]
    ckpt_io.export_draft(tmp_path / "draft", draft.cfg, draft.state_dict(), "float32")
    export(tiny_target, tmp_path / "artifact", ExportConfig(max_context=512, max_cells=1024),
           progress=False, draft=tmp_path / "draft")
    data = data_io.load(generated / "data.npz")
    prompts = make_prompts(0, 40)
    chosen = [prompts[i] for i in data.prompt_ids[data.sample_ids == 0][:8]]
    ckpt = load_target_checkpoint(tiny_target)
    ours = evaluate(draft, build_target(ckpt, "cpu"), chat_tokenizer(ckpt), chosen,
                    temperature=temperature, max_new_tokens=10, n_draft=4, batch=8)["all"]
    llm = LLM(tmp_path / "artifact", max_sessions=8, threads=1)
    llm.generate([p.text for p in chosen],
                 [SamplingParams(max_tokens=10, temperature=temperature, seed=EVAL_SEED + i)
                  for i in range(len(chosen))])
    stats = llm.executor.stats
    assert (stats.cycles, stats.accepted) == (ours["cycles"], ours["accepted"])
    assert temperature > 0 or ours["accepted"] > 0


def test_batched_decoding_equals_each_prompt_alone(tiny_target):
    from tools.dflash_train.generate import decode_batch
    from tools.dflash_train.target import build_target, chat_tokenizer, load_target_checkpoint

    ckpt = load_target_checkpoint(tiny_target)
    target, tokenizer = build_target(ckpt, "cpu"), chat_tokenizer(ckpt)
    prompts = [tokenizer.encode(p.text, chat=True) for p in make_prompts(0, 40)[::97][:5]]
    assert len({len(p) for p in prompts}) > 1  # left padding is exercised
    for temperature in (0.0, 0.7):
        seeds = [11, 12, 13, 14, 15]
        together = decode_batch(target, prompts, 12, (1, 3), temperature, seeds)
        alone = [decode_batch(target, [p], 12, (1, 3), temperature, [s])[0]
                 for p, s in zip(prompts, seeds)]
        assert together == alone


def test_checkpoint_shards_are_bounded_and_bf16_moments_resume(generated, tiny_target,
                                                               tmp_path):
    meta, tensors = train(tmp_path / "a", generated, tiny_target, "--steps", "3")
    assert meta["moments_dtype"] == "bfloat16"
    assert all(t.dtype == torch.bfloat16 for n, t in tensors.items() if not n.startswith("model"))
    draft = DFlashDraft(DraftConfig(**meta["draft"]))
    optimizer = torch.optim.AdamW(draft.parameters())
    draft(torch.zeros(1, 3, 128), torch.zeros(1, 5, 64), torch.arange(3)[None],
          torch.arange(3, 8)[None], torch.ones(1, 5, 8, dtype=torch.bool)).sum().backward()
    optimizer.step()
    size = ckpt_io.save_checkpoint(tmp_path / "small", draft, optimizer, {}, "bfloat16", 40_000)
    files = sorted((tmp_path / "small").iterdir())
    assert len(files) > 3 and all(f.stat().st_size <= 40_000 for f in files)
    assert size == sum(f.stat().st_size for f in files)
    _, reloaded = ckpt_io.load_checkpoint(tmp_path / "small")
    assert all(torch.equal(reloaded[f"model.{n}"], p) for n, p in draft.named_parameters())
    resumed, _ = train(tmp_path / "b", generated, tiny_target, "--resume",
                       str(tmp_path / "a" / "ckpt"), "--steps", "5")
    assert resumed["state"]["step"] == 5 and resumed["train"]["moments_dtype"] == "bfloat16"


def test_all_runs_every_phase_into_one_folder(tiny_target, tmp_path):
    out = tmp_path / "run"
    run(["all", "--target", str(tiny_target), "--out", str(out), *COMMON, *DRAFT, "--limit",
         "6", "--samples", "0", "--max-new-tokens", "8", "--steps", "4", "--eval-prompts", "3",
         "--eval-max-new-tokens", "6", "--generate-seconds", "60", "--train-seconds", "60"])
    log = json.loads((out / "log.json").read_text())
    assert list(log) == ["generate", "train", "eval"]
    assert log["train"][0]["step"] == 4
    assert set(log["eval"][0]["results"]) == {"0.0", "0.7"}
    names = {str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()}
    assert names == {"data.npz", "log.json", "ckpt/checkpoint.json", "ckpt/shard-00.safetensors",
                     "draft/config.json", "draft/model.safetensors"}
