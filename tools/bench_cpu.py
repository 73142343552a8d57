"""SmolLM2 prefill and decode tokens/s: cellspec (ONNX Runtime CPU) vs transformers eager.

Both run the same dequantized weights (transformers reads the same GGUF), the same random
prompts, the same thread count, in one process, one after the other; the table gives the ratio.

    python tools/bench_cpu.py [--artifact DIR] [--batches 1,8] [--prompt 128] [--decode 32]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact", type=Path, default=Path("out/smollm2-bench"),
                        help="artifact folder; the bundled SmolLM2 is exported there if missing")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per sequence")
    parser.add_argument("--decode", type=int, default=32, help="decode steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="best of N timings")
    return parser.parse_args()


def ensure_artifact(folder: Path) -> None:
    if (folder / "manifest.json").is_file():
        return
    from cellspec.export import ExportConfig, export
    from cellspec.export.gguf import find_bundled_gguf

    export(find_bundled_gguf(), folder, ExportConfig(max_context=1024, max_cells=8192))


def bench_cellspec(folder: Path, prompts: np.ndarray, steps: int, threads: int) -> tuple:
    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import BatchInput, Sampling

    executor = Executor.load(folder, max_sessions=len(prompts), threads=threads)
    sids = [executor.open_session() for _ in prompts]
    for sid in sids:
        executor.set_sampling(sid, Sampling())
    start = time.perf_counter()
    outs = executor.execute([BatchInput(s, tuple(p.tolist()), 0) for s, p in zip(sids, prompts)])
    prefill = time.perf_counter() - start
    tokens = [o.token for o in outs]
    start = time.perf_counter()
    for _ in range(steps):
        outs = executor.execute([BatchInput(s, (t,), executor.pos(s))
                                 for s, t in zip(sids, tokens)])
        tokens = [o.token for o in outs]
    return prefill, time.perf_counter() - start


def bench_transformers(model, prompts: np.ndarray, steps: int) -> tuple:
    import torch

    with torch.no_grad():
        start = time.perf_counter()
        out = model(torch.from_numpy(prompts), use_cache=True)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(steps):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(token, cache=out.cache, use_cache=True)
    return prefill, time.perf_counter() - start


def load_transformers(threads: int):
    import torch
    import transformers

    from cellspec.export.gguf import find_bundled_gguf

    torch.set_num_threads(threads)
    path = find_bundled_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def main() -> None:
    args = parse_args()
    ensure_artifact(args.artifact)
    model = load_transformers(args.threads)
    rng = np.random.default_rng(0)
    print(f"prompt {args.prompt} tokens, {args.decode} decode steps, {args.threads} threads, "
          f"best of {args.repeats}")
    print(f"{'batch':>5} {'phase':>8} {'cellspec tok/s':>15} {'transformers tok/s':>19} "
          f"{'ratio':>6}")
    for batch in [int(b) for b in args.batches.split(",")]:
        prompts = rng.integers(100, 40000, size=(batch, args.prompt), dtype=np.int64)
        ours = [bench_cellspec(args.artifact, prompts, args.decode, args.threads)
                for _ in range(args.repeats)]
        theirs = [bench_transformers(model, prompts, args.decode) for _ in range(args.repeats)]
        for phase, index, count in (("prefill", 0, batch * args.prompt),
                                    ("decode", 1, batch * args.decode)):
            a = count / min(r[index] for r in ours)
            b = count / min(r[index] for r in theirs)
            print(f"{batch:>5} {phase:>8} {a:>15.1f} {b:>19.1f} {a / b:>6.2f}")


if __name__ == "__main__":
    main()
