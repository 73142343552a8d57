"""`cellspec export | generate | bench`: parse, call the library, print.

Every cellspec error and every command-line misuse prints one line, `cellspec: error: ...`, and
exits 2 (1 when the engine failed mid-run); Ctrl-C exits 130. No traceback in any case.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from cellspec.errors import CellspecError, ExecutionFailed

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
BENCH_PROMPT = "Write a long story about a lighthouse keeper and the sea."


class UsageError(Exception):
    """argparse refused the command line."""


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


def cmd_export(args: argparse.Namespace) -> int:
    from cellspec.export import ExportConfig, export

    widths = {} if args.widths is None else {"static_widths": args.widths}
    config = ExportConfig(dtype=args.dtype, dynamic_width=args.dynamic_width,
                          max_context=args.max_context, max_cells=args.max_cells,
                          taps=args.taps, **widths)
    if args.engines is None and args.compute_capabilities:
        raise UsageError("--compute-capabilities needs --engines tensorrt-rtx")
    capabilities = list(args.compute_capabilities or ("sm80", "sm89"))
    if args.engines:
        from cellspec.export.tensorrt import check_compute_capabilities

        check_compute_capabilities(capabilities)
    manifest = export(args.checkpoint, args.out, config, progress=True, overwrite=args.overwrite,
                      draft=args.draft)
    model = manifest.model
    drafted = f", DFlash draft block {manifest.draft.block_size}" if manifest.draft else ""
    print(f"exported {model.name or args.checkpoint} ({model.architecture}, {model.num_layers} "
          f"layers, vocab {model.vocab_size}, context {manifest.max_context}{drafted}) "
          f"to {args.out}")
    if args.engines:
        from cellspec.export.engines import build_artifact_engines

        manifest = build_artifact_engines(args.out, capabilities, progress=True)
        print(f"built {len(manifest.engines)} TensorRT-RTX engines (not executed: see README)")
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from cellspec.llm import LLM, SamplingParams

    prompts = args.prompts or [read_stdin_prompt()]
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_tokens=args.max_tokens, stop=tuple(args.stop), seed=args.seed)
    llm = LLM(args.model, backend=args.backend, max_sessions=args.max_sessions,
              threads=args.threads, chat=False if args.no_chat else None,
              speculation=False if args.no_speculation else None, n_draft=args.n_draft)
    if len(prompts) == 1:
        for delta in llm.stream(prompts[0], params):
            sys.stdout.write(delta)
            sys.stdout.flush()
        sys.stdout.write("\n")
        return 0
    for index, output in enumerate(llm.generate(prompts, params)):
        print(f"[{index}] {output.prompt}\n{output.text}\n")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from cellspec.llm import LLM, SamplingParams

    llm = LLM(args.model, backend=args.backend, max_sessions=max(args.batch), threads=args.threads,
              speculation=False if args.no_speculation else None, n_draft=args.n_draft)
    params = SamplingParams(max_tokens=args.tokens, ignore_eos=True, seed=0)
    llm.generate([BENCH_PROMPT], SamplingParams(max_tokens=2))  # warm-up
    for batch in args.batch:
        start = time.perf_counter()
        outputs = llm.generate([BENCH_PROMPT] * batch, params)
        seconds = time.perf_counter() - start
        tokens = sum(len(o.token_ids) for o in outputs)
        print(f"batch {batch:3d}: {tokens} tokens in {seconds:.2f} s, {tokens / seconds:.1f} "
              "tokens/s")
    stats = getattr(llm.executor, "stats", None)
    if stats is not None:
        print(f"DFlash: {stats.cycles} cycles, tau {stats.tau:.2f}, accepted "
              f"{stats.accepted}/{stats.proposed} proposals, {stats.bonus} bonus tokens")
    return 0


def read_stdin_prompt() -> str:
    from cellspec.errors import InvalidArgument

    if sys.stdin is None or sys.stdin.isatty():
        raise InvalidArgument("no prompt: pass one or more prompts, or pipe one on stdin")
    return sys.stdin.read()


def make_parser() -> Parser:
    parser = Parser(prog="cellspec", description="Export and serve LLMs on ONNX Runtime.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    export = commands.add_parser("export", help="export a checkpoint into an artifact")
    export.add_argument("checkpoint", help="a Hugging Face checkpoint folder or a .gguf file")
    export.add_argument("out", help="the artifact folder to write")
    export.add_argument("--dtype", default="float32", help="float32 | float16 | bfloat16")
    export.add_argument("--widths", type=int_list, help="static step widths, e.g. 1,2,4,8")
    export.add_argument("--dynamic-width", type=int, default=256)
    export.add_argument("--max-context", type=int)
    export.add_argument("--max-cells", type=int)
    export.add_argument("--taps", type=int_list, default=(), help="tapped layer ids, e.g. 1,9")
    export.add_argument("--overwrite", action="store_true", help="replace an existing artifact")
    export.add_argument("--draft", help="a DFlash draft checkpoint folder (z-lab format)")
    export.add_argument("--engines", choices=["tensorrt-rtx"],
                        help="also build TensorRT engines (needs cellspec[tensorrt])")
    export.add_argument("--compute-capabilities", type=str_list,
                        help="engine targets, e.g. sm80,sm89 (default: sm80,sm89)")
    export.set_defaults(run=cmd_export)

    generate = commands.add_parser("generate", help="generate text for prompts")
    generate.add_argument("prompts", nargs="*", metavar="PROMPT")
    add_model_arguments(generate)
    generate.add_argument("--max-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--top-k", type=int, default=0)
    generate.add_argument("--seed", type=int)
    generate.add_argument("--stop", action="append", default=[], help="a stop string (repeat)")
    generate.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    generate.add_argument("--max-sessions", type=int, default=8)
    generate.set_defaults(run=cmd_generate)

    bench = commands.add_parser("bench", help="measure decode tokens/s")
    add_model_arguments(bench)
    bench.add_argument("--batch", type=int_list, default=(1, 8), help="batch sizes, e.g. 1,8")
    bench.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    bench.set_defaults(run=cmd_bench)
    return parser


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="artifact, checkpoint folder or .gguf (default: bundled "
                                        "SmolLM2-135M-Instruct)")
    parser.add_argument("--backend", default="ort-cpu")
    parser.add_argument("--threads", type=int)
    parser.add_argument("--no-speculation", action="store_true",
                        help="plain decoding even when the artifact has a DFlash draft")
    parser.add_argument("--n-draft", type=int, help="DFlash proposals per cycle")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)
        if args.command == "bench" and any(b < 1 for b in args.batch):
            raise UsageError(f"--batch {args.batch}: batch sizes must be >= 1")
        return args.run(args)
    except (CellspecError, UsageError) as error:
        print(f"cellspec: error: {error}", file=sys.stderr)
        return EXIT_FAILED if isinstance(error, ExecutionFailed) else EXIT_USAGE
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except (OSError, MemoryError) as error:  # a file, folder or allocation the system refused
        print(f"cellspec: error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILED
