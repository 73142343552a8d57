"""Argument parsing for tools/train_dflash.py; `all` chains the phases in one process."""

from __future__ import annotations

import argparse
from pathlib import Path

from tools.dflash_train import commands
from tools.dflash_train import data as data_io
from tools.dflash_train.target import load_target_checkpoint


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _common(p: argparse.ArgumentParser, out: bool = True) -> None:
    p.add_argument("--target", type=Path, help="target .gguf file or HF folder "
                   "(default: the bundled SmolLM2-135M-Instruct GGUF)")
    p.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
    p.add_argument("--prompt-seed", type=int, default=0, help="seed of the prompt set")
    p.add_argument("--per-category", type=int, default=400, help="prompts per category")
    if out:
        p.add_argument("--out", type=Path, required=True, help="run folder (data.npz, ckpt/, "
                       "draft/, log.json)")


def _generate(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generate")
    g.add_argument("--data", type=Path, help="existing data.npz to extend / train on")
    g.add_argument("--samples", type=int, default=2, help="sampled answers per prompt after "
                   "the greedy one")
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--self-prompts", type=int, default=0, help="N > 0: the target first writes "
                   "up to N more training prompts, each like a template prompt (self_prompts.py)")
    g.add_argument("--self-prompt-temperature", type=float, default=0.8)
    g.add_argument("--greedy-after", type=int, default=0, help="N > 0: a sampled answer turns "
                   "greedy after a cut uniform in 0..N-1 and trains only on its greedy tail")
    g.add_argument("--gen-seed", dest="seed_gen", type=int, default=0)
    g.add_argument("--max-new-tokens", type=int, default=256)
    g.add_argument("--gen-batch", type=int, default=256)
    g.add_argument("--gen-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="target dtype while generating")
    g.add_argument("--generate-seconds", type=float, help="time budget of generation")
    g.add_argument("--limit", type=int, help="only the first N training prompts")


def _train(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("draft shape (ignored with --resume)")
    g.add_argument("--layers", type=int, help="draft depth (default 2; with --init: grow the "
                   "draft to this many layers, the new ones appended as identities)")
    g.add_argument("--intermediate-size", type=int, default=768,
                   help="draft MLP width (0 = the target's)")
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--taps", type=_ints, help="target layer ids, e.g. 1,14,27 (with --init: "
                   "the draft reads these instead, tap by tap; taps beyond its own count are "
                   "added with zero weights)")
    g.add_argument("--num-taps", type=int, default=3, help="without --taps: spread this many")
    g.add_argument("--mask-token-id", type=int, help="default: highest unused special token")
    g = p.add_argument_group("training (default: TrainConfig, or the resumed checkpoint's)")
    g.add_argument("--resume", type=Path, help="checkpoint folder to continue from")
    g.add_argument("--init", type=Path, help="start from this exported draft's weights (a "
                   "z-lab folder, e.g. the shipped one) with a fresh optimizer and schedule")
    for flag, kind in (("--lr", float), ("--min-lr-ratio", float), ("--warmup-steps", int),
                       ("--batch", int), ("--gamma", float), ("--weight-decay", float),
                       ("--grad-clip", float), ("--seed", int), ("--distill", float)):
        g.add_argument(flag, type=kind)
    g.add_argument("--anchors-per-seq", dest="anchors", type=int)
    g.add_argument("--moments-dtype", choices=("bfloat16", "float32"))
    g.add_argument("--steps", type=int, help="schedule length (0 = fit to --plan-seconds when the "
                   "learning-rate warm-up ends)")
    g.add_argument("--train-seconds", type=float, help="time budget of this training run")
    g.add_argument("--plan-seconds", type=float, help="with --steps 0: time the schedule "
                   "spans (default --train-seconds; larger to finish it in a resumed run)")
    g.add_argument("--run-steps", type=int, help="stop after this many steps in this run")
    g.add_argument("--save-every", type=float, default=120.0, help="checkpoint period, s")
    g.add_argument("--amp", action=argparse.BooleanOptionalAction,
                   help="bf16 autocast (default: on for cuda)")


def _eval(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("eval")
    g.add_argument("--eval-prompts", type=int, help="at most this many prompts (default all)")
    g.add_argument("--split", choices=("held-out", "train"), default="held-out")
    g.add_argument("--temperatures", type=_floats, default=[0.0, 0.7])
    g.add_argument("--n-draft", type=_ints, help="proposals per cycle, e.g. 15,7,3 "
                   "(default: block - 1, 7 and 3)")
    g.add_argument("--eval-batch", type=int, default=128)
    g.add_argument("--eval-max-new-tokens", dest="max_new_tokens_eval", type=int, default=256)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="train_dflash.py")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prompts", help="write the prompt set as JSONL")
    p.add_argument("--out", type=Path, default=Path("out/dflash_prompts.jsonl"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--per-category", type=int, default=400)
    p = sub.add_parser("generate", help="self-distillation data")
    _common(p)
    _generate(p)
    p = sub.add_parser("train", help="train (or --resume) the draft")
    _common(p)
    _train(p)
    p.add_argument("--data", type=Path, help="data.npz (default: OUT/data.npz)")
    p = sub.add_parser("eval", help="held-out acceptance (tau) per category")
    _common(p)
    _eval(p)
    p.add_argument("--checkpoint", type=Path, required=True, help="ckpt/ or exported draft/")
    p = sub.add_parser("export", help="z-lab draft folder (config.json + model.safetensors)")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--draft-out", type=Path, required=True)
    p.add_argument("--dtype", choices=("float16", "float32"), default="float16")
    p.add_argument("--proposal-vocab", type=int, default=0, help="K > 0: also write "
                   "proposal_vocab.json, the K tokens most frequent in --data's answers (and the "
                   "eos ids): cellspec's draft then proposes only those")
    p.add_argument("--data", type=Path, help="data.npz (with --proposal-vocab)")
    p.add_argument("--target", type=Path, help="target .gguf file or HF folder, for its eos ids "
                   "(default: the bundled SmolLM2-135M-Instruct GGUF)")
    p = sub.add_parser("all", help="generate -> train -> eval -> export into --out")
    p.add_argument("--export", action=argparse.BooleanOptionalAction, default=True,
                   help="write OUT/draft (leave it out when files must be few: `export` "
                   "rebuilds it from OUT/ckpt anywhere)")
    _common(p)
    _generate(p)
    _train(p)
    _eval(p)
    return parser


def run(argv: list[str] | None = None) -> None:
    args = make_parser().parse_args(argv)
    if getattr(args, "intermediate_size", None) == 0:
        args.intermediate_size = None
    if args.command == "export" and args.proposal_vocab and args.data is None:
        make_parser().error("export --proposal-vocab needs --data")
    if args.command == "export" and args.proposal_vocab < 0:
        make_parser().error("--proposal-vocab must be >= 0")
    if args.command == "prompts":
        commands.cmd_prompts(args)
    elif args.command == "generate":
        commands.cmd_generate(args)
    elif args.command == "train":
        commands.cmd_train(args)
    elif args.command == "eval":
        commands.cmd_eval(args)
    elif args.command == "export":
        commands.cmd_export(args)
    else:
        run_all(args)


def run_all(args: argparse.Namespace) -> None:
    """One process, the target read once: generate (skipped with --data and
    --generate-seconds 0), train, eval, export into --out."""
    ckpt = load_target_checkpoint(args.target)
    if args.data is not None and args.generate_seconds == 0:
        data = data_io.load(args.data)
    else:
        data = commands.cmd_generate(args, ckpt)
    args.checkpoint = commands.cmd_train(args, ckpt, data)
    commands.cmd_eval(args, ckpt)
    if args.export:
        args.draft_out, args.dtype = args.out / commands.DRAFT_NAME, "float16"
        commands.cmd_export(args)
