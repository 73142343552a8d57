"""`cellspec export | generate | bench | cache`: parse, call the library, print.

Every cellspec error and every command-line misuse prints one line, `cellspec: error: ...`, and
exits 2 (1 when the engine failed mid-run); Ctrl-C exits 130. No traceback in any case. Library
messages name the keyword a Python caller passed (`max_session_tokens`); printed here, they name
the flag instead (`--max-session-tokens`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence

from cellspec.cli_parser import UsageError, make_parser
from cellspec.errors import CellspecError, ExecutionFailed, InvalidArgument

__all__ = ["main", "make_parser"]

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
BENCH_PROMPT = "Write a long story about a lighthouse keeper and the sea."
DEFAULT_MAX_SESSIONS = 8  # the most sessions `generate` opens unless --max-sessions says
PREFILL_PROGRESS_TOKENS = 512  # longer prompts (all together) show a prefill bar

# Keywords of the Python API -> their command-line spelling, replaced where a message starts with
# one (`max_tokens 0: expected ...`) or names one in a hint (`raise max_session_tokens`).
FLAGS = {
    "max_session_tokens": "--max-session-tokens", "max_sessions": "--max-sessions",
    "max_tokens": "--max-tokens", "temperature": "--temperature", "top_p": "--top-p",
    "top_k": "--top-k", "seed": "--seed", "stop": "--stop", "threads": "--threads",
    "n_draft": "--n-draft", "max_spec_batch": "--max-spec-batch", "backend": "--backend",
    "draft_threshold": "--draft-threshold", "tree_nodes": "--tree-nodes",
    "tree_choices": "--tree-choices",
    "lookup_tokens": "--lookup-tokens",
    "model": "--model", "dtype": "--dtype",
    "static_widths": "--widths", "dynamic_width": "--dynamic-width",
    "max_context": "--max-context", "max_cells": "--max-cells", "taps": "--taps", "out": "OUT",
    "overwrite=True": "--overwrite", "chat=False": "--no-chat", "quantize": "--quantize",
    "accuracy_level": "--accuracy-level",
}
_KEYWORDS = "|".join(re.escape(k) for k in sorted(FLAGS, key=len, reverse=True))
_KEYWORD = re.compile(rf"(^|\b(?:raise|lower|pass|use|leave) )({_KEYWORDS})(?![\w=])")


def flag_message(message: str) -> str:
    """`message` with the Python keywords it names spelled as command-line flags."""
    return _KEYWORD.sub(lambda match: match[1] + FLAGS[match[2]], message)


def cmd_export(args: argparse.Namespace) -> int:
    from cellspec.export import ExportConfig, export

    widths = {} if args.widths is None else {"static_widths": args.widths}
    config = ExportConfig(dtype=args.dtype, dynamic_width=args.dynamic_width,
                          max_context=args.max_context, max_cells=args.max_cells,
                          taps=args.taps, quantize=args.quantize,
                          accuracy_level=args.accuracy_level, **widths)
    if args.engines is None and args.compute_capabilities:
        raise UsageError("--compute-capabilities needs --engines tensorrt-rtx")
    if args.engines and args.quantize == "int4":  # refused before the export, not after it
        from cellspec.export.portable import INT4_NO_ENGINE

        raise UsageError(f"--engines tensorrt-rtx with --quantize int4: {INT4_NO_ENGINE}")
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
    from cellspec.llm import SamplingParams, check_not_empty

    prompts = args.prompts or [read_stdin_prompt()]
    for index, prompt in enumerate(prompts):  # before a first use's export, not after it
        check_not_empty(index, prompt)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                            max_tokens=args.max_tokens, stop=tuple(args.stop), seed=args.seed)
    # One prompt gets one session with the whole cache; N prompts run min(N, 8) at once.
    llm = make_llm(args, min(len(prompts), DEFAULT_MAX_SESSIONS),
                   chat=False if args.no_chat else None)
    progress = PrefillProgress()
    try:
        if len(prompts) == 1:
            for delta in llm.stream(prompts[0], params, on_prefill=progress):
                sys.stdout.write(delta)
                sys.stdout.flush()
            sys.stdout.write("\n")
            return 0
        for index, output in enumerate(llm.generate(prompts, params, on_prefill=progress)):
            print(f"[{index}] {output.prompt}\n{output.text}\n")
    finally:
        progress.close()
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from cellspec.llm import SamplingParams

    if any(b < 1 for b in args.batch):
        raise UsageError(f"--batch {','.join(map(str, args.batch))}: batch sizes must be >= 1")
    if args.tokens < 1:
        raise UsageError(f"--tokens {args.tokens}: expected an integer >= 1")
    llm = make_llm(args, max(args.batch))
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


def cmd_cache_list(args: argparse.Namespace) -> int:
    from cellspec.model_cache import cache_entries, cache_root, shown

    entries = cache_entries()
    print(f"{shown(cache_root())}:{'' if entries else ' empty'}")
    for entry in entries:
        source = entry.source or "source not recorded"
        if entry.is_partial:
            source = ("left by an interrupted export" if entry.is_stale else
                      "an export is writing it, or was killed in the last 10 minutes")
        print(f"  {entry.path.name}  {human_size(entry.num_bytes)}  {source}")
    return 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    from cellspec.model_cache import cache_root, clear_cache, shown

    removed = clear_cache(args.name)
    for path in removed:
        print(f"removed {shown(path)}")
    if not removed:
        print(f"{shown(cache_root())}: nothing to remove")
    return 0


def make_llm(args: argparse.Namespace, default_sessions: int, chat: bool | None = None):
    """The LLM of --model; --max-sessions, when given, overrides `default_sessions`."""
    from cellspec.llm import LLM

    sessions = default_sessions if args.max_sessions is None else args.max_sessions
    return LLM(args.model, backend=args.backend, max_sessions=sessions,
               max_session_tokens=args.max_session_tokens, threads=args.threads, chat=chat,
               speculation=False if args.no_speculation else (args.speculation or None),
               n_draft=args.n_draft, max_spec_batch=args.max_spec_batch,
               draft_threshold=args.draft_threshold, tree_nodes=args.tree_nodes,
               lookup_tokens=args.lookup_tokens, tree_choices=args.tree_choices)


class PrefillProgress:
    """`on_prefill` for the LLM: a stderr bar over the prompt tokens, shown when there are more
    than PREFILL_PROGRESS_TOKENS of them, so a long prompt does not look like a hang."""

    def __init__(self) -> None:
        self.bar = None

    def __call__(self, done: int, total: int) -> None:
        if total <= PREFILL_PROGRESS_TOKENS:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="prefill", unit="tok", file=sys.stderr,
                            leave=False)
        self.bar.update(done - self.bar.n)
        if done >= total:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def human_size(num_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.1f} {unit}"
    return f"{num_bytes} B"


def read_stdin_prompt() -> str:
    if sys.stdin is None or sys.stdin.isatty():
        raise InvalidArgument("no prompt: pass one or more prompts, or pipe one on stdin")
    return sys.stdin.read()


COMMANDS = {"export": cmd_export, "generate": cmd_generate, "bench": cmd_bench,
            "cache list": cmd_cache_list, "cache clear": cmd_cache_clear}


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser()
    if not argv:  # what cellspec is and what it can do, rather than one line about a command
        print(parser.format_help(), end="", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
        return COMMANDS[args.command](args)
    except (CellspecError, UsageError) as error:
        print(f"cellspec: error: {flag_message(str(error))}", file=sys.stderr)
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
