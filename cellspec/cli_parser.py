"""The command line's grammar: every command, option, help text and default (cli.py runs them)."""

from __future__ import annotations

import argparse

from cellspec import __version__
from cellspec.artifact import DTYPES, TOP_K


class UsageError(Exception):
    """argparse, or a check of the command line itself, refused it."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's default prints usage and exits itself
        raise UsageError(message)


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected integers separated by commas") from error
    return values


def str_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def make_parser() -> Parser:
    parser = Parser(prog="cellspec", description="Export LLM checkpoints to ONNX and generate "
                    "text with them on ONNX Runtime, with DFlash speculative decoding.",
                    epilog="`cellspec COMMAND --help` describes a command's options.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser,
                                     metavar="COMMAND")
    add_export_parser(commands)
    add_generate_parser(commands)
    add_bench_parser(commands)
    add_cache_parser(commands)
    return parser


def add_export_parser(commands: argparse._SubParsersAction) -> None:
    export = commands.add_parser("export", help="export a checkpoint into an artifact folder")
    export.add_argument("checkpoint", help="a Hugging Face checkpoint folder or a .gguf file")
    export.add_argument("out", metavar="OUT", help="the artifact folder to write: missing, "
                        "empty, or an artifact to replace with --overwrite")
    export.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="weights and activations; bfloat16 is for TensorRT engines "
                             "(default: float32)")
    export.add_argument("--quantize", choices=["none", "int4"], default="none",
                        help="int4: projections as 4-bit blocks (a GGUF's own Q4_1/Q4_0 blocks "
                             "as they are, round-to-nearest otherwise), embedding and LM head "
                             "as 8-bit blocks (default: none)")
    export.add_argument("--accuracy-level", type=int, choices=[0, 4], default=4,
                        help="int4 arithmetic on the CPU: 4 = int8 activations (fast), 0 = "
                             "float (default: 4)")
    export.add_argument("--widths", type=int_list, metavar="LIST",
                        help="static step widths, ascending (default: 1,2,4,8,16,32)")
    export.add_argument("--dynamic-width", type=int, default=256, metavar="N",
                        help="widest step of the dynamic-width method, 0 for none (default: 256)")
    export.add_argument("--max-context", type=int, metavar="N",
                        help="positions per session (default: the model's trained length, at "
                             "most 4096)")
    export.add_argument("--max-cells", type=int, metavar="N",
                        help="cells of the cache pool shared by all sessions (default: 8192)")
    export.add_argument("--taps", type=int_list, default=(), metavar="LIST",
                        help="layer ids whose outputs the target graph returns, e.g. 1,9 "
                             "(default: none, or those --draft reads)")
    export.add_argument("--overwrite", action="store_true",
                        help="replace the artifact at OUT once the new one is complete")
    export.add_argument("--draft", metavar="PATH",
                        help="a DFlash draft checkpoint folder in the z-lab format "
                             "(default: none)")
    export.add_argument("--engines", choices=["tensorrt-rtx"],
                        help="also build TensorRT engines; needs cellspec[tensorrt] "
                             "(default: none)")
    export.add_argument("--compute-capabilities", type=str_list, metavar="LIST",
                        help="engine targets, e.g. sm80,sm89 (default: sm80,sm89)")
    export.set_defaults(command="export")


def add_generate_parser(commands: argparse._SubParsersAction) -> None:
    generate = commands.add_parser("generate", help="generate text for prompts")
    generate.add_argument("prompts", nargs="*", metavar="PROMPT",
                          help="prompts to answer; a single one is streamed as it is generated "
                               "(default: one read from stdin)")
    add_model_arguments(generate)
    generate.add_argument("--max-tokens", type=int, default=64, metavar="N",
                          help="tokens generated per prompt at most (default: 64)")
    generate.add_argument("--temperature", type=float, default=0.0, metavar="T",
                          help="sampling temperature, 0 for greedy decoding (default: 0)")
    generate.add_argument("--top-p", type=float, default=1.0, metavar="P",
                          help="sample from the likeliest tokens holding this much probability "
                               "(default: 1, all)")
    generate.add_argument("--top-k", type=int, default=0, metavar="K",
                          help="sample from the k likeliest tokens, 0 for all (default: 0)")
    generate.add_argument("--seed", type=int, metavar="S",
                          help="seed of the sampling draws (default: a fresh random seed)")
    generate.add_argument("--stop", action="append", default=[], metavar="STR",
                          help="a string that ends the answer, repeat for more (default: none)")
    generate.add_argument("--no-chat", action="store_true",
                          help="send the prompt as it is, without the model's chat template")
    add_session_arguments(generate, "one per prompt, at most 8")
    generate.set_defaults(command="generate")


def add_bench_parser(commands: argparse._SubParsersAction) -> None:
    bench = commands.add_parser("bench", help="measure decode tokens/s")
    add_model_arguments(bench)
    bench.add_argument("--batch", type=int_list, default=(1, 8), metavar="LIST",
                       help="batch sizes to measure, e.g. 1,8 (default: 1,8)")
    bench.add_argument("--tokens", type=int, default=64, metavar="N",
                       help="tokens generated per request (default: 64)")
    add_session_arguments(bench, "the largest batch")
    bench.set_defaults(command="bench")


def add_cache_parser(commands: argparse._SubParsersAction) -> None:
    cache = commands.add_parser("cache", help="list or clear the artifacts exported on first use "
                                              "(~/.cache/cellspec, or $CELLSPEC_CACHE)")
    actions = cache.add_subparsers(dest="action", required=True, parser_class=Parser,
                                   metavar="ACTION")
    listing = actions.add_parser("list", help="each cached artifact, its size and its source")
    listing.set_defaults(command="cache list")
    clear = actions.add_parser("clear", help="remove cached artifacts and the partial exports "
                                             "that killed exports left behind")
    clear.add_argument("name", nargs="?", metavar="NAME",
                       help="the entry to remove: its folder name, or the checkpoint name "
                            "before the hash (default: every entry)")
    clear.set_defaults(command="cache clear")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    from cellspec.runtime.backend import BACKENDS

    parser.add_argument("--model", metavar="PATH",
                        help="an artifact folder, or a checkpoint folder or .gguf file exported "
                             "once into the cache (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--backend", choices=BACKENDS, default=BACKENDS[0],
                        help=f"where the graphs run (default: {BACKENDS[0]})")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="CPU threads per graph (default: all cores)")
    speculate = parser.add_mutually_exclusive_group()
    speculate.add_argument("--speculation", action="store_true",
                           help="DFlash speculation (the default when the artifact has a draft, "
                                "and for the bundled model, exported with its shipped draft)")
    speculate.add_argument("--no-speculation", action="store_true",
                           help="plain decoding even when the artifact has a DFlash draft "
                                "(the same text, slower at batch 1)")
    parser.add_argument("--n-draft", type=int, metavar="N",
                        help="most DFlash proposals per cycle (default: the draft's block size "
                        "- 1, on ort-cpu at most 7; with --draft-threshold 0 at most 3, or 2 "
                        "with int4 weights)")
    parser.add_argument("--draft-threshold", type=float, metavar="T",
                        help="verify only the proposals while the product of the draft's "
                        "probabilities stays >= T, in [0, 1) (0: all of them; default: 0.2 on "
                        "ort-cpu, else 0)")
    parser.add_argument("--max-spec-batch", type=int, metavar="N",
                        help="the most requests that speculate in one step; with more, the step "
                        "decodes plainly (default: no limit, 4 on ort-cpu)")
    parser.add_argument("--tree-nodes", type=int, metavar="N",
                        help="verify a tree of N proposals per cycle, grown from the draft's "
                        "top choices (0: a chain; default: 15 on ort-cuda with CellAttention, "
                        "the one backend that verifies trees exactly, else chains)")
    parser.add_argument("--tree-choices", type=int, metavar="C",
                        help="grow each tree from the first C of the draft's choices per row "
                        f"(1..{TOP_K}; default: all {TOP_K}; 1: the chain of first choices, "
                        "queued on the device as a tree is)")
    parser.add_argument("--lookup-tokens", type=int, metavar="N",
                        help="after the draft's proposals, verify up to N more tokens looked up "
                        "in the request's own text: what followed the latest earlier "
                        "occurrence of its last few tokens (the same text; 0: none; default: "
                        "8 on ort-cpu, else 0)")


def add_session_arguments(parser: argparse.ArgumentParser, default_sessions: str) -> None:
    parser.add_argument("--max-sessions", type=int, metavar="N",
                        help=f"requests run at once; they share the cache pool (default: "
                             f"{default_sessions})")
    parser.add_argument("--max-session-tokens", type=int, default=0, metavar="N",
                        help="tokens per request, prompt and answer together; 0 for an equal "
                             "share of the pool, up to the model's context (default: 0)")
