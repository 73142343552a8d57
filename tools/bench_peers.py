"""cellspec vs ONNX Runtime GenAI 0.18 on the CPU: the same SmolLM2 weights, side by side.

Both run the bundled SmolLM2-135M-Instruct in float32 and in 4-bit: cellspec's artifacts
(`--quantize int4` keeps the GGUF's Q4_1/Q8_0 blocks) and GenAI's model-builder folders built
from the same GGUF dequantized (`../shared/bench/smollm2_hf.py`, then
`python -m onnxruntime_genai.models.builder -p fp32|int4 -e cpu`). Same random prompts, the same
thread count, one process, systems interleaved, best of N; decode and prefill tokens/s, and
the ratio cellspec / GenAI at the same weight format. GenAI is a benchmark dependency only.

    python tools/bench_peers.py --og-fp32 OG_FP32 --og-int4 OG_INT4 \\
        [--cs-fp32 DIR] [--cs-int4 DIR] [--batches 1,8] [--modes greedy,sampled]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

SAMPLED = dict(temperature=0.7, top_p=0.9)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--og-fp32", type=Path, help="GenAI fp32 model folder")
    parser.add_argument("--og-int4", type=Path, help="GenAI int4 model folder")
    parser.add_argument("--cs-fp32", type=Path, default=Path("out/peer-cs-fp32"),
                        help="cellspec float32 artifact (exported here if missing)")
    parser.add_argument("--cs-int4", type=Path, default=Path("out/peer-cs-int4"),
                        help="cellspec int4 artifact (exported here if missing)")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--modes", default="greedy,sampled")
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the rows here too")
    return parser.parse_args()


def ensure_artifact(folder: Path, quantize: str) -> Path:
    if not (folder / "manifest.json").is_file():
        from cellspec.export import ExportConfig, export
        from cellspec.export.gguf import find_bundled_gguf

        export(find_bundled_gguf(), folder, ExportConfig(quantize=quantize, max_context=1024,
                                                         max_cells=8192))
    return folder


def run_cellspec(folder: Path, prompts: np.ndarray, args, sampled: bool) -> tuple[float, float]:
    from cellspec.runtime.executor import Executor
    from cellspec.runtime.types import BatchInput, Sampling

    executor = Executor.load(folder, max_sessions=len(prompts), threads=args.threads)
    sids = [executor.open_session() for _ in prompts]
    for sid in sids:
        executor.set_sampling(sid, Sampling(**SAMPLED) if sampled else Sampling(), 1)
    start = time.perf_counter()
    outs = executor.execute([BatchInput(s, tuple(p.tolist()), 0) for s, p in zip(sids, prompts)])
    prefill = time.perf_counter() - start
    tokens = [o.token for o in outs]
    start = time.perf_counter()
    for _ in range(args.decode):
        outs = executor.execute([BatchInput(s, (t,), executor.pos(s))
                                 for s, t in zip(sids, tokens)])
        tokens = [o.token for o in outs]
    return prefill, time.perf_counter() - start


def run_genai(folder: Path, prompts: np.ndarray, args, sampled: bool) -> tuple[float, float]:
    import onnxruntime_genai as og

    model = og.Model(og.Config(str(folder)))
    params = og.GeneratorParams(model)
    options = dict(batch_size=len(prompts), max_length=prompts.shape[1] + args.decode + 2,
                   do_sample=sampled)
    if sampled:
        options.update(SAMPLED, random_seed=1)
    params.set_search_options(**options)
    generator = og.Generator(model, params)
    start = time.perf_counter()
    generator.append_tokens(prompts.astype(np.int32).reshape(-1))
    prefill = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.decode):
        generator.generate_next_token()
    return prefill, time.perf_counter() - start


def set_genai_threads(folder: Path, threads: int) -> None:
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options["intra_op_num_threads"] = threads
    path.write_text(json.dumps(config, indent=1))


def systems(args) -> list[tuple[str, str, object, Path]]:
    """(name, weight format, runner, folder) of every system asked for."""
    found = []
    for fmt in ("fp32", "int4"):
        genai = getattr(args, f"og_{fmt}")
        if genai is not None:
            set_genai_threads(genai, args.threads)
            found.append((f"ort-genai {fmt}", fmt, run_genai, genai))
        folder = ensure_artifact(getattr(args, f"cs_{fmt}"), "int4" if fmt == "int4" else "none")
        found.append((f"cellspec {fmt}", fmt, run_cellspec, folder))
    return found


def main() -> None:
    args = parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        prompts = rng.integers(100, 40000, size=(batch, args.prompt), dtype=np.int64)
        for mode in args.modes.split(","):
            timings: dict[str, list] = {}
            for _ in range(args.repeats):  # interleaved: drift hits every system alike
                for name, fmt, run, folder in systems(args):
                    timings.setdefault((name, fmt), []).append(
                        run(folder, prompts, args, mode == "sampled"))
            for (name, fmt), runs in timings.items():
                prefill, decode = min(r[0] for r in runs), min(r[1] for r in runs)
                rows.append(dict(batch=batch, mode=mode, system=name, format=fmt,
                                 prefill_tok_s=batch * args.prompt / prefill,
                                 decode_tok_s=batch * args.decode / decode))
                print(f"batch {batch} {mode:7s} {name:16s} prefill {rows[-1]['prefill_tok_s']:7.1f}"
                      f" decode {rows[-1]['decode_tok_s']:6.1f} tok/s", flush=True)
    print_ratios(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def print_ratios(rows: list[dict]) -> None:
    """cellspec / GenAI decode tokens/s at the same weight format, batch and mode."""
    by = {(r["batch"], r["mode"], r["system"]): r["decode_tok_s"] for r in rows}
    print("\n| batch | mode | format | cellspec tok/s | GenAI tok/s | cellspec / GenAI |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    for (batch, mode, system), ours in sorted(by.items()):
        if not system.startswith("cellspec"):
            continue
        fmt = system.split()[-1]
        peer = by.get((batch, mode, f"ort-genai {fmt}"))
        ratio = f"**{ours / peer:.2f}x**" if peer else "-"
        print(f"| {batch} | {mode} | {fmt} | {ours:.1f} | {peer or 0:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
