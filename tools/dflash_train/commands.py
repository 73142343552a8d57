"""The subcommands: each parses nothing, calls the modules and prints (cli.py parses)."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, fields, replace
from pathlib import Path

import torch

from tools.dflash_train import checkpoint as ckpt_io
from tools.dflash_train import data as data_io
from tools.dflash_train import prompts as prompt_set
from tools.dflash_train.blocks import default_gamma
from tools.dflash_train.config import DraftConfig, spread_taps
from tools.dflash_train.evaluate import evaluate
from tools.dflash_train.generate import run_generate
from tools.dflash_train.model import DFlashDraft
from tools.dflash_train.progress import RunLog, say
from tools.dflash_train.session import RunLimits, make_trainer, resume_trainer, run_training
from tools.dflash_train.target import build_target, chat_tokenizer, load_target_checkpoint
from tools.dflash_train.train import TrainConfig, TrainState

CHECKPOINT_BUDGET_BYTES = 48_000_000
DEFAULT_LAYERS = 2
DATA_NAME, CHECKPOINT_NAME, DRAFT_NAME = "data.npz", "ckpt", "draft"


def device_of(args: argparse.Namespace) -> torch.device:
    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def cmd_prompts(args: argparse.Namespace) -> None:
    prompts = prompt_set.make_prompts(args.seed, args.per_category)
    train, held_out = prompt_set.split(prompts)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    prompt_set.write_prompts(prompts, args.out)
    counts = {c: sum(p.category == c for p in prompts) for c in prompt_set.CATEGORIES}
    say("prompts", f"{len(prompts)} prompts ({len(train)} training, {len(held_out)} held out), "
        f"fingerprint {prompt_set.fingerprint(prompts)} -> {args.out}")
    say("prompts", json.dumps(counts))


def training_prompts(args) -> tuple[list[prompt_set.Prompt], list[int]]:
    """The prompt set and the ids of its training prompts (the first --limit of them)."""
    prompts = prompt_set.make_prompts(args.prompt_seed, args.per_category)
    ids = [i for i, p in enumerate(prompts) if not p.is_held_out]
    return prompts, ids[: args.limit] if args.limit else ids


def cmd_generate(args: argparse.Namespace, ckpt=None) -> data_io.Sequences:
    ckpt = ckpt or load_target_checkpoint(args.target)
    device = device_of(args)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.gen_dtype]
    target = build_target(ckpt, device, dtype)
    tokenizer = chat_tokenizer(ckpt)
    prompts, ids = training_prompts(args)
    out = args.out / DATA_NAME
    source = args.data or (out if out.is_file() else None)
    existing = data_io.load(source) if source else None
    written = self_written_prompts(args, target, tokenizer, prompts, ids, existing)
    if written:  # after the template prompts: ids len(prompts) ..
        ids = [*ids, *range(len(prompts), len(prompts) + len(written))]
        prompts = [*prompts, *written]
    settings = {k: str(v) for k, v in vars(args).items() if k != "func"}
    log = RunLog(args.out, "generate", {**settings, "device": str(device),
                                        "prompt_fingerprint": prompt_set.fingerprint(prompts)})
    data = run_generate(target, tokenizer, prompts, ids, out, log, num_samples=args.samples,
                        temperature=args.temperature, seed=args.seed_gen,
                        max_new_tokens=args.max_new_tokens, batch=args.gen_batch,
                        max_seconds=args.generate_seconds, greedy_after=args.greedy_after,
                        existing=existing,
                        meta={"self_prompts": [[p.category, p.text] for p in written]}
                        if written else None)
    data.meta["prompt_fingerprint"] = prompt_set.fingerprint(prompts)
    data_io.save(data, out)
    return data


def self_written_prompts(args, target, tokenizer, prompts, ids, existing
                         ) -> list[prompt_set.Prompt]:
    """--self-prompts N: the prompts the target writes (self_prompts.py), or those the data
    being extended already records, so that its prompt ids keep their meaning."""
    recorded = (existing.meta.get("self_prompts") if existing is not None else None) or []
    if recorded:
        return [prompt_set.Prompt(category, text) for category, text in recorded]
    if not getattr(args, "self_prompts", 0):
        return []
    from tools.dflash_train.self_prompts import write_prompts

    return write_prompts(target, tokenizer, prompts, ids, args.self_prompts,
                         temperature=args.self_prompt_temperature, seed=args.seed_gen,
                         batch=args.gen_batch)


def default_mask_token(ckpt) -> int:
    """The highest-id special token that is not bos/eos/pad and that the chat format never
    writes (SmolLM2: 16, <empty_output>; its embedding row equals those of the other unused
    specials up to Q4_1 rounding, i.e. it was never trained and never occurs in chat data)."""
    config, tokenizer = ckpt.config, chat_tokenizer(ckpt)
    used = set(tokenizer.encode("hello", chat=True)) | set(tokenizer.eos_token_ids)
    used |= {config.get("bos_token_id"), config.get("pad_token_id")}
    specials = [t["id"] for t in json.loads(ckpt.tokenizer_json).get("added_tokens", [])
                if t.get("special") and t["id"] not in used]
    if not specials:
        raise SystemExit("no unused special token to mask with: pass --mask-token-id")
    return max(specials)


def draft_config(args, ckpt) -> DraftConfig:
    depth = ckpt.config["num_hidden_layers"]
    taps = tuple(args.taps) if args.taps else spread_taps(depth, args.num_taps)
    mask = args.mask_token_id if args.mask_token_id is not None else default_mask_token(ckpt)
    return DraftConfig.for_target(ckpt.config, num_layers=args.layers or DEFAULT_LAYERS,
                                  block_size=args.block_size,
                                  taps=taps, mask_token_id=mask,
                                  intermediate_size=args.intermediate_size)


def train_overrides(args) -> dict:
    """TrainConfig fields given on the command line (None = not given)."""
    names = {f.name for f in fields(TrainConfig)}
    return {k: v for k, v in vars(args).items() if k in names and v is not None}


def cmd_train(args: argparse.Namespace, ckpt=None, data=None) -> Path:
    ckpt = ckpt or load_target_checkpoint(args.target)
    device = device_of(args)
    amp = device.type == "cuda" if args.amp is None else args.amp
    data = data or data_io.load(args.data or args.out / DATA_NAME)
    folder = args.out / CHECKPOINT_NAME
    if args.resume and args.init:
        raise SystemExit("train: --resume and --init exclude each other")
    if args.resume:
        trainer, state = resume_trainer(ckpt, args.resume, train_overrides(args), device, amp)
    else:  # fresh, or warm from an exported draft (its shape and weights, a new schedule)
        start = load_draft(args.init, device) if args.init else None
        if start is not None and args.layers is not None:
            start = grow_draft(start, args.layers)
        if start is not None and args.taps:
            start = retap_draft(start, tuple(args.taps))
        cfg = draft_config(args, ckpt) if start is None else start.cfg
        overrides = {"gamma": default_gamma(cfg.block_size), **train_overrides(args)}
        trainer = make_trainer(ckpt, cfg, TrainConfig(**overrides), device, amp)
        if start is not None:
            trainer.draft.load_state_dict(start.state_dict())
            say("train", f"initialised from {args.init}")
        state = TrainState(seed=trainer.cfg.seed)
        _check_budget(cfg, trainer.cfg.moments_dtype)
    if args.steps is not None:
        state.total_steps = args.steps
    limits = RunLimits(args.train_seconds, args.plan_seconds, args.run_steps, args.save_every)
    log = RunLog(args.out, "train", {"draft": trainer.draft.cfg.to_dict(),
                                     "train": asdict(trainer.cfg), "device": str(device),
                                     "amp": amp, "data": data.fingerprint(),
                                     "resume": str(args.resume or ""),
                                     "init": str(args.init or "")})
    say("train", f"draft {trainer.draft.cfg.num_params() / 1e6:.2f}M parameters, "
        f"{len(data)} sequences, {data.num_tokens} tokens, device {device}, amp {amp}")
    run_training(trainer, state, data, folder, log, limits)
    return folder


def _check_budget(cfg: DraftConfig, moments_dtype: str) -> None:
    size = ckpt_io.checkpoint_bytes(cfg, moments_dtype)
    if size > CHECKPOINT_BUDGET_BYTES:
        say("train", f"WARNING: a checkpoint of this draft is {size / 1e6:.1f} MB, over the "
            f"{CHECKPOINT_BUDGET_BYTES / 1e6:.0f} MB one GPU run can bring back")


def grow_draft(draft: DFlashDraft, layers: int) -> DFlashDraft:
    """The draft with `layers` layers: its own first, then new ones whose output projections
    (o_proj, down_proj) start at zero, so that each new layer adds nothing to the residual
    stream and the grown draft proposes exactly what the smaller one did until training moves
    them (their other weights get the usual random init, so gradients reach them at once)."""
    cfg = draft.cfg
    if layers < cfg.num_layers:
        raise SystemExit(f"train: --layers {layers} with --init: the draft has {cfg.num_layers} "
                         "layers, and can only grow")
    if layers == cfg.num_layers:
        return draft
    grown = DFlashDraft(replace(cfg, num_layers=layers)).to(draft.inv_freq.device)
    missing, unexpected = grown.load_state_dict(draft.state_dict(), strict=False)
    assert not unexpected and all(n.startswith("layers.") for n in missing), (missing, unexpected)
    with torch.no_grad():
        for layer in grown.layers[cfg.num_layers:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    say("train", f"grown from {cfg.num_layers} to {layers} layers (new layers start as "
        "identities)")
    return grown.eval().requires_grad_(False)


def retap_draft(draft: DFlashDraft, taps: tuple[int, ...]) -> DFlashDraft:
    """The draft reading the target's layers `taps`: its fc's input block i reads taps[i] in
    place of its own tap i, and blocks for taps beyond its own count start at zero, so that an
    added tap changes nothing until training moves it (a replaced one changes what its block
    reads). Fewer taps than the draft's are refused."""
    cfg = draft.cfg
    if taps == cfg.tap_layer_ids:
        return draft
    if len(taps) < len(cfg.tap_layer_ids):
        raise SystemExit(f"train: --taps {','.join(map(str, taps))} with --init: the draft reads "
                         f"{len(cfg.tap_layer_ids)} taps, and can only keep or add taps")
    try:
        retapped = DFlashDraft(replace(cfg, tap_layer_ids=taps)).to(draft.inv_freq.device)
    except ValueError as error:
        raise SystemExit(f"train: --taps: {error}") from None
    state = draft.state_dict()
    old = state["fc.weight"]
    fc = torch.zeros(old.shape[0], len(taps) * cfg.hidden_size, dtype=old.dtype,
                     device=old.device)
    fc[:, : old.shape[1]] = old
    retapped.load_state_dict({**state, "fc.weight": fc})
    say("train", f"taps {list(cfg.tap_layer_ids)} -> {list(taps)} (added taps start at zero)")
    return retapped.eval().requires_grad_(False)


def load_draft(folder: Path, device: torch.device) -> DFlashDraft:
    """A draft from a training checkpoint (checkpoint.json) or an exported z-lab folder."""
    if (folder / ckpt_io.META_NAME).is_file():
        meta, tensors = ckpt_io.load_checkpoint(folder)
        cfg, state = DraftConfig(**meta["draft"]), ckpt_io.model_state(tensors)
    else:
        from tools.dflash_train.target import import_cellspec_export

        import_cellspec_export()
        from cellspec.export.checkpoint import load_checkpoint

        exported = load_checkpoint(folder)
        cfg = DraftConfig.from_zlab(exported.config)
        state = {n: torch.from_numpy(exported.tensors[n]).float() for n in exported.tensors}
    draft = DFlashDraft(cfg)
    draft.load_state_dict(state)
    return draft.to(device).eval().requires_grad_(False)


def cmd_eval(args: argparse.Namespace, ckpt=None) -> dict:
    ckpt = ckpt or load_target_checkpoint(args.target)
    device = device_of(args)
    draft = load_draft(args.checkpoint, device)
    target, tokenizer = build_target(ckpt, device), chat_tokenizer(ckpt)
    prompts = prompt_set.make_prompts(args.prompt_seed, args.per_category)
    chosen = prompt_set.interleaved([p for p in prompts
                                     if p.is_held_out == (args.split == "held-out")])
    chosen = chosen[: args.eval_prompts] if args.eval_prompts else chosen
    limit = draft.cfg.block_size - 1
    n_drafts = sorted({min(n, limit) for n in (args.n_draft or [limit, 7, 3])}, reverse=True)
    log = RunLog(args.out, "eval", {"checkpoint": str(args.checkpoint), "prompts": len(chosen),
                                    "split": args.split, "n_drafts": n_drafts})
    results = {}
    for temperature in args.temperatures:
        tick = time.time()
        results[str(temperature)] = evaluate(draft, target, tokenizer, chosen,
                                             temperature=temperature, n_drafts=n_drafts,
                                             max_new_tokens=args.max_new_tokens_eval,
                                             batch=args.eval_batch)
        for n, table in results[str(temperature)].items():
            line = "  ".join(f"{k} {v['tau']:.2f}" for k, v in table.items())
            say("eval", f"T={temperature} n_draft={n} ({time.time() - tick:.0f} s) tau: {line}")
    log.finish(results=results)
    return results


def cmd_export(args: argparse.Namespace) -> list[Path]:
    draft = load_draft(args.checkpoint, torch.device("cpu"))
    files = ckpt_io.export_draft(args.draft_out, draft.cfg, draft.state_dict(), args.dtype)
    if getattr(args, "proposal_vocab", 0):
        ckpt = load_target_checkpoint(args.target)  # makes cellspec.export's readers importable
        from cellspec.export.draft_checkpoint import PROPOSAL_VOCAB_NAME

        vocab = data_io.proposal_vocab(data_io.load(args.data), args.proposal_vocab,
                                       tuple(chat_tokenizer(ckpt).eos_token_ids))
        path = args.draft_out / PROPOSAL_VOCAB_NAME
        path.write_text(json.dumps(vocab))
        files.append(path)
        say("export", f"{len(vocab['token_ids'])} proposable tokens, "
            f"{100 * vocab['answer_tokens_covered']:.2f}% of the data's answer tokens")
    say("export", ", ".join(f"{f.name} {f.stat().st_size / 1e6:.1f} MB" for f in files))
    return files
