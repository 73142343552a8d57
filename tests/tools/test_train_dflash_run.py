"""tools/train_dflash.py end to end on a tiny random Llama with a real tokenizer and chat
template: generate -> train -> resume -> eval -> export, and cellspec running the export."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.tools.conftest import COMMON, DRAFT, train  # noqa: E402 (after the importorskips)
from tools.dflash_train import checkpoint as ckpt_io  # noqa: E402
from tools.dflash_train import data as data_io  # noqa: E402
from tools.dflash_train.cli import run  # noqa: E402
from tools.dflash_train.config import DraftConfig  # noqa: E402
from tools.dflash_train.evaluate import speculative_decode, walk_cycles  # noqa: E402
from tools.dflash_train.model import DFlashDraft  # noqa: E402
from tools.dflash_train.prompts import Prompt, make_prompts  # noqa: E402

# -- a tiny end-to-end run ------------------------------------------------------------------


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
    assert len(straight) == 3 * len(DFlashDraft(DraftConfig(**straight_meta["draft"])).state_dict())
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name


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
                    temperature=temperature, max_new_tokens=10, n_drafts=(4,), batch=8)
    ours = ours["4"]["all"]
    # as evaluated: 4 proposals, uncut, every session speculating (LLM limits these on ort-cpu)
    llm = LLM(tmp_path / "artifact", max_sessions=8, threads=1, n_draft=4, max_spec_batch=8,
              draft_threshold=0)
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
    assert set(log["eval"][0]["results"]["0.0"]) == {"4", "3"}  # block 5: n_draft 4 (and 3)
    names = {str(f.relative_to(out)) for f in out.rglob("*") if f.is_file()}
    assert names == {"data.npz", "log.json", "ckpt/checkpoint.json", "ckpt/shard-00.safetensors",
                     "draft/config.json", "draft/model.safetensors"}


def test_init_starts_from_an_exported_draft(overfit, generated, tiny_target, tmp_path):
    draft = overfit[0]
    ckpt_io.export_draft(tmp_path / "draft", draft.cfg, draft.state_dict())
    meta, tensors = train(tmp_path / "run", generated, tiny_target, "--init",
                          str(tmp_path / "draft"), "--steps", "1", "--lr", "0",
                          "--weight-decay", "0")
    assert meta["state"]["step"] == 1 and DraftConfig(**meta["draft"]) == draft.cfg
    state = ckpt_io.model_state(tensors)
    for name, tensor in draft.state_dict().items():  # the exported float16 weights, unmoved
        assert torch.equal(state[name], tensor.half().float()), name
    with pytest.raises(SystemExit, match="exclude each other"):
        train(tmp_path / "both", generated, tiny_target, "--init", str(tmp_path / "draft"),
              "--resume", str(tmp_path / "run" / "ckpt"))


def test_init_grows_the_draft_with_identity_layers(overfit, generated, tiny_target, tmp_path):
    """--layers above the exported draft's depth appends layers whose output projections start
    at zero: the grown draft's hidden states equal the exported draft's, bit for bit, until
    training moves them; shrinking is refused."""
    draft = overfit[0]
    ckpt_io.export_draft(tmp_path / "draft", draft.cfg, draft.state_dict())
    meta, tensors = train(tmp_path / "run", generated, tiny_target, "--init",
                          str(tmp_path / "draft"), "--layers", "4", "--steps", "1", "--lr", "0",
                          "--weight-decay", "0")
    cfg = DraftConfig(**meta["draft"])
    assert cfg.num_layers == 4 and cfg.intermediate_size == draft.cfg.intermediate_size
    state = ckpt_io.model_state(tensors)
    for name, tensor in draft.state_dict().items():
        assert torch.equal(state[name], tensor.half().float()), name
    for i in (2, 3):
        assert not state[f"layers.{i}.self_attn.o_proj.weight"].any()
        assert not state[f"layers.{i}.mlp.down_proj.weight"].any()
        assert state[f"layers.{i}.self_attn.q_proj.weight"].abs().sum() > 0  # random, trainable
    grown, small = DFlashDraft(cfg), DFlashDraft(draft.cfg)
    grown.load_state_dict(state)
    small.load_state_dict({n: t.half().float() for n, t in draft.state_dict().items()})
    rng = torch.Generator().manual_seed(0)
    h, taps, q, s = cfg.hidden_size, len(cfg.tap_layer_ids), cfg.block_size, 7
    inputs = (torch.randn(2, s, taps * h, generator=rng), torch.randn(2, q, h, generator=rng),
              torch.arange(s).expand(2, s), torch.arange(s, s + q).expand(2, q),
              torch.ones(2, q, s + q, dtype=torch.bool))
    with torch.no_grad():
        assert torch.equal(grown(*inputs), small(*inputs))
    with pytest.raises(SystemExit, match="can only grow"):
        train(tmp_path / "shrunk", generated, tiny_target, "--init", str(tmp_path / "draft"),
              "--layers", "1")


def test_init_with_taps_reads_new_layers_and_adds_taps_at_zero(overfit, generated, tiny_target,
                                                               tmp_path):
    """--taps with --init: the exported draft's fc reads the new layers block by block (its
    weights unmoved), an added tap's block starts at zero, so the draft's hidden states equal
    the exported draft's on the taps they share, bit for bit; fewer taps are refused."""
    draft = overfit[0]
    assert draft.cfg.tap_layer_ids == (0, 2)
    ckpt_io.export_draft(tmp_path / "draft", draft.cfg, draft.state_dict())
    start = ["--init", str(tmp_path / "draft"), "--steps", "1", "--lr", "0", "--weight-decay", "0"]
    exported = {n: t.half().float() for n, t in draft.state_dict().items()}
    # `train` passes --taps 0,2 (the draft's own) first; the later --taps wins
    meta, tensors = train(tmp_path / "swap", generated, tiny_target, *start, "--taps", "0,3")
    assert DraftConfig(**meta["draft"]).tap_layer_ids == (0, 3)
    state = ckpt_io.model_state(tensors)
    for name, tensor in exported.items():
        assert torch.equal(state[name], tensor), name
    meta, tensors = train(tmp_path / "add", generated, tiny_target, *start, "--taps", "0,2,3")
    cfg = DraftConfig(**meta["draft"])
    assert cfg.tap_layer_ids == (0, 2, 3)
    state = ckpt_io.model_state(tensors)
    h = cfg.hidden_size
    assert state["fc.weight"].shape == (h, 3 * h)
    assert torch.equal(state["fc.weight"][:, : 2 * h], exported["fc.weight"])
    assert not state["fc.weight"][:, 2 * h:].any()
    added, small = DFlashDraft(cfg), DFlashDraft(draft.cfg)
    added.load_state_dict(state)
    small.load_state_dict(exported)
    rng = torch.Generator().manual_seed(0)
    q, s = cfg.block_size, 7
    shared = torch.randn(2, s, 2 * h, generator=rng)
    rest = (torch.randn(2, q, h, generator=rng), torch.arange(s).expand(2, s),
            torch.arange(s, s + q).expand(2, q), torch.ones(2, q, s + q, dtype=torch.bool))
    third = 5 * torch.randn(2, s, h, generator=rng)  # whatever the added tap reads
    with torch.no_grad():
        assert torch.equal(added(torch.cat([shared, third], -1), *rest), small(shared, *rest))
    with pytest.raises(SystemExit, match="can only keep or add"):
        train(tmp_path / "fewer", generated, tiny_target, *start, "--taps", "2")
    with pytest.raises(SystemExit, match="distinct layer ids"):
        train(tmp_path / "bad", generated, tiny_target, *start, "--taps", "0,2,9")


def test_distill_loss_is_the_kl_to_the_full_targets_next_token_distribution(generated,
                                                                             tiny_target):
    """--distill 1: each row's loss is KL(p || q), p from transformers' own full forward of the
    target (its logits at the position before the row's token), q the draft's; the weighted
    mean over rows is the loss. --distill 0 keeps the labels' CE."""
    from tools.dflash_train import blocks
    from tools.dflash_train.cli import make_parser
    from tools.dflash_train.commands import draft_config
    from tools.dflash_train.session import make_trainer
    from tools.dflash_train.target import build_target, load_target_checkpoint
    from tools.dflash_train.train import TrainConfig, block_hidden, collate

    args = make_parser().parse_args(["train", "--out", "unused", *DRAFT])
    ckpt = load_target_checkpoint(tiny_target)
    trainer = make_trainer(ckpt, draft_config(args, ckpt), TrainConfig(distill=1.0),
                           torch.device("cpu"), amp=False)
    data = data_io.load(generated / "data.npz")
    ids, lengths, prompt_lens = collate(data, np.arange(3), "cpu")
    anchors, is_valid = blocks.sample_anchors(np.random.default_rng(0), prompt_lens, lengths, 4)
    anchors, is_valid = torch.from_numpy(anchors), torch.from_numpy(is_valid)
    lengths = torch.from_numpy(lengths)
    from tools.dflash_train.target import target_taps_and_final

    taps, final = target_taps_and_final(trainer.target, ids, trainer.draft.cfg.tap_layer_ids)
    with torch.no_grad():
        loss, metrics = trainer.loss(ids, lengths, taps, anchors, is_valid, final)
        ce_loss, _ = trainer.loss(ids, lengths, taps, anchors, is_valid)
        reference = build_target(ckpt, "cpu")(input_ids=ids).logits.log_softmax(-1)  # [N, S, V]
        rows = block_hidden(trainer.draft, trainer.embed, ids, taps, anchors)[:, :, 1:]
        log_q = (rows @ trainer.lm_head.T).log_softmax(-1)
    bsz = trainer.draft.cfg.block_size
    labels = blocks.block_labels(ids, lengths, anchors, is_valid, bsz)
    weights = blocks.position_weights(bsz, trainer.cfg.gamma)
    total = weighted = ce_total = 0.0
    for n, a, j in zip(*np.nonzero(labels.numpy() >= 0)):
        log_p = reference[n, anchors[n, a] + j]  # row j + 1 predicts token anchor + j + 1
        kl = float((log_p.exp() * (log_p - log_q[n, a, j])).sum())
        total += float(weights[j]) * kl
        ce_total += float(weights[j]) * -float(log_q[n, a, j, labels[n, a, j]])
        weighted += float(weights[j])
    assert float(loss) == pytest.approx(total / weighted, rel=1e-4)
    assert float(ce_loss) == pytest.approx(ce_total / weighted, rel=1e-4)
    assert metrics["kl"] > 0 and 1.0 <= metrics["tau_target"] <= bsz
    with pytest.raises(ValueError, match="distill"):
        TrainConfig(distill=1.5)


def test_greedy_after_answers_are_sampled_up_to_the_cut_then_greedy(tiny_target, tmp_path):
    from tools.dflash_train.generate import Job, anchor_offset, decode_batch
    from tools.dflash_train.target import build_target, chat_tokenizer, load_target_checkpoint

    run(["generate", "--target", str(tiny_target), "--out", str(tmp_path), *COMMON, "--limit",
         "12", "--samples", "1", "--max-new-tokens", "10", "--gen-batch", "8",
         "--greedy-after", "6", "--gen-seed", "3"])
    data = data_io.load(tmp_path / "data.npz")
    assert data.meta["greedy_after"] == 6
    ckpt = load_target_checkpoint(tiny_target)
    target, eos = build_target(ckpt, "cpu"), tuple(chat_tokenizer(ckpt).eos_token_ids)
    turned = 0
    for i in np.flatnonzero(data.sample_ids == 1):
        prompt_len = int(data.prompt_lens[i])
        prompt, answer = data.sequence(i)[:prompt_len].tolist(), data.sequence(i)[prompt_len:]
        job = Job(int(data.prompt_ids[i]), 1, tuple(prompt))
        cut = job.cut(3, 6)
        assert 0 <= cut < 6
        assert data.anchor_starts[i] == prompt_len + anchor_offset(cut, len(answer))
        (sampled, _), = decode_batch(target, [prompt], 10, eos, 0.7, [job.seed(3)])
        assert answer[:cut].tolist() == sampled[:cut]  # the sampled prefix, as drawn alone
        if cut >= len(answer):
            assert data.anchor_starts[i] == len(data.sequence(i))  # no greedy tail: no anchor
            continue
        # the tail is the greedy continuation of the prompt and the sampled prefix
        (greedy, _), = decode_batch(target, [prompt + answer[:cut].tolist()], 10 - cut, eos,
                                    0.0, [0])
        assert answer[cut:].tolist() == greedy
        turned += answer[cut:].tolist() != sampled[cut:]
    assert turned > 0  # some tails differ from the sampled answer: the cut was applied
    greedy_rows = np.flatnonzero(data.sample_ids == 0)
    assert (data.anchor_starts[greedy_rows] == data.prompt_lens[greedy_rows]).all()


def test_data_files_without_anchor_starts_anchor_at_the_prompts_end(generated, tmp_path):
    with np.load(generated / "data.npz") as f:
        arrays = {name: f[name] for name in f.files if name != "anchor_starts"}
    np.savez_compressed(tmp_path / "old.npz", **arrays)
    data = data_io.load(tmp_path / "old.npz")
    assert data.anchor_starts.dtype == np.int32
    assert data.anchor_starts.tolist() == data.prompt_lens.tolist()
    assert len(data.anchor_starts) == len(data) > 0


def test_export_writes_the_most_frequent_answer_tokens_as_the_proposal_vocab(
        overfit, generated, tiny_target, tmp_path):
    from tools.dflash_train.target import chat_tokenizer, load_target_checkpoint

    draft = overfit[0]
    ckpt_io.export_draft(tmp_path / "trained", draft.cfg, draft.state_dict())
    draft_dir = tmp_path / "draft"
    run(["export", "--checkpoint", str(tmp_path / "trained"), "--draft-out", str(draft_dir),
         "--proposal-vocab", "5", "--data", str(generated / "data.npz"), "--target",
         str(tiny_target)])
    vocab = json.loads((draft_dir / "proposal_vocab.json").read_text())
    data = data_io.load(generated / "data.npz")
    answers = np.concatenate([data.sequence(i)[data.prompt_lens[i]:] for i in range(len(data))])
    ids, counts = np.unique(answers, return_counts=True)
    by_count = [int(i) for _, i in sorted(zip(-counts, ids))][:5]  # ties: the lower id
    eos = chat_tokenizer(load_target_checkpoint(tiny_target)).eos_token_ids
    assert vocab["token_ids"] == sorted(set(by_count) | set(eos))
    assert vocab["answer_tokens_covered"] == pytest.approx(
        np.isin(answers, vocab["token_ids"]).mean(), abs=1e-6)
    with pytest.raises(SystemExit):
        run(["export", "--checkpoint", str(tmp_path / "trained"), "--draft-out",
             str(draft_dir), "--proposal-vocab", "5"])  # no --data


def test_clean_keeps_the_first_line_without_label_or_quotes():
    from tools.dflash_train.self_prompts import clean

    assert clean('Request: "Write a poem about rain."\n\nIt should rhyme.') == (
        "Write a poem about rain.")
    assert clean("\n  How do I bake bread at home?  \n") == "How do I bake bread at home?"
    assert clean("New question - What is 2 + 2?") == "What is 2 + 2?"
    assert clean("Too short") == "Too short" and clean("Short") is None
    assert clean("") is None and clean("x" * 301) is None
    for talk in ("Here's an example of the requested request:", "I'm ready to assist. What can I",
                 "Sure! Write a haiku about rain.", "**Example of a Python function**",
                 "What a delightful task! Here is one:"):
        assert clean(talk) is None, talk
    assert clean("Surely you can list three rivers?") == "Surely you can list three rivers?"
    assert clean("Is it true that ice floats?") == "Is it true that ice floats?"


def test_self_written_prompts_are_answered_recorded_and_kept_on_extension(tiny_target, tmp_path):
    from tools.dflash_train.prompts import CATEGORIES
    from tools.dflash_train.self_prompts import write_prompts
    from tools.dflash_train.target import build_target, chat_tokenizer, load_target_checkpoint

    args = ["generate", "--target", str(tiny_target), "--out", str(tmp_path), *COMMON,
            "--limit", "4", "--max-new-tokens", "6", "--gen-batch", "8", "--self-prompts", "6"]
    run([*args, "--samples", "0"])
    data = data_io.load(tmp_path / "data.npz")
    base = make_prompts(0, 40)
    written = data.meta["self_prompts"]
    assert 1 <= len(written) <= 6
    texts = {p.text for p in base}
    ckpt = load_target_checkpoint(tiny_target)
    tokenizer = chat_tokenizer(ckpt)
    for offset, (category, text) in enumerate(written):
        assert category in CATEGORIES and text not in texts
        assert not Prompt(category, text).is_held_out
        rows = np.flatnonzero(data.prompt_ids == len(base) + offset)
        assert len(rows) == 1  # its greedy answer
        sequence = data.sequence(int(rows[0]))
        assert sequence[: data.prompt_lens[rows[0]]].tolist() == tokenizer.encode(text, chat=True)
    # the same target and seed write the same prompts
    again = write_prompts(build_target(ckpt, "cpu"), tokenizer, base,
                          [i for i, p in enumerate(base) if not p.is_held_out][:4], 6,
                          temperature=0.8, seed=0, batch=8)
    assert [[p.category, p.text] for p in again] == written
    # extending the data keeps the recorded prompts and their ids, and answers them again
    run([*args, "--samples", "1", "--data", str(tmp_path / "data.npz")])
    extended = data_io.load(tmp_path / "data.npz")
    assert extended.meta["self_prompts"] == written
    sampled = extended.prompt_ids[extended.sample_ids == 1]
    assert set(range(len(base), len(base) + len(written))) <= set(sampled.tolist())
