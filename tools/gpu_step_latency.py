"""Absolute latency of one target step on a CUDA GPU (ONNX Runtime CUDA EP), vs the weight floor.

An exploratory measurement for the future `ort-cuda` backend, not the backend. It exports a
random-weight model of SmolLM2-135M's shape (or `--layers/--hidden/...`) with cellspec, binds
the KV pools and every input on the device with IOBinding, and times one step at each width,
both plainly and replayed as a CUDA graph (one `gpu_graph_id` per width). The floor is weight
bytes / bandwidth (4.3 TB/s measured on the H200).

    python tools/gpu_step_latency.py --out results.json [--dtypes float16,float32]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

SMOLLM2 = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
               max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dtypes", default="float16,float32")
    parser.add_argument("--widths", default="1,4,8,16,32")
    parser.add_argument("--context", type=int, default=128, help="cells read by every step")
    parser.add_argument("--max-cells", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--bandwidth", type=float, default=4.3e12, help="bytes/s")
    parser.add_argument("--cpu", action="store_true", help="CPU EP dry run (no GPU)")
    parser.add_argument("--config", type=json.loads, default={},
                        help="LlamaConfig overrides as JSON, e.g. '{\"num_hidden_layers\": 8}'")
    return parser.parse_args()


def export_model(folder: Path, dtype: str, max_cells: int, overrides: dict) -> Path:
    import torch
    import transformers

    from cellspec.export import ExportConfig, export

    checkpoint = folder / "checkpoint"
    if not checkpoint.exists():
        torch.manual_seed(0)
        config = transformers.LlamaConfig(**{**SMOLLM2, **overrides})
        transformers.LlamaForCausalLM(config).save_pretrained(checkpoint)
    out = folder / f"artifact-{dtype}"
    export(checkpoint, out, ExportConfig(dtype=dtype, max_cells=max_cells), progress=False)
    return out


class Bound:
    """A session whose every input and output lives on the device at fixed addresses."""

    def __init__(self, ort, artifact: Path, width: int, context: int, device: str):
        from cellspec.artifact import Manifest

        self.ort, self.device = ort, device
        self.manifest = Manifest.load(artifact)
        self.session = make_session(ort, artifact / "target.onnx", device)
        self.binding = self.session.io_binding()
        self.values = {}
        for arg in self.session.get_inputs():
            self.bind_input(arg, width, context)
        dims = {"T": width, "R": 1}
        for arg in self.session.get_outputs():
            shape = [dims[d] if isinstance(d, str) else d for d in arg.shape]
            value = self.ort.OrtValue.ortvalue_from_shape_and_type(
                shape, _numpy(arg.type), device, 0)
            self.binding.bind_ortvalue_output(arg.name, value)

    def bind_input(self, arg, width: int, context: int) -> None:
        rng = np.random.default_rng(0)
        dims = {"T": width, "R": 1, "N": context, "S": context + width}
        shape = [dims.get(d, d) if isinstance(d, str) else d for d in arg.shape]
        dtype = _numpy(arg.type)
        if arg.name == "tokens":
            host = rng.integers(0, self.manifest.model.vocab_size, shape).astype(dtype)
        elif arg.name == "positions":
            host = np.arange(context, context + width, dtype=dtype)
        elif arg.name == "logits_rows":
            host = np.array([width - 1], dtype=dtype)
        elif arg.name == "cells_read":
            host = np.arange(context, dtype=dtype)
        elif arg.name.startswith("attn_bias"):
            host = np.zeros(shape, dtype=dtype)
        else:  # a pool
            host = (0.1 * rng.standard_normal(shape)).astype(dtype)
        value = self.ort.OrtValue.ortvalue_from_numpy(host, self.device, 0)
        self.values[arg.name] = value
        self.binding.bind_ortvalue_input(arg.name, value)

    def time(self, iters: int, graph_id: int | None) -> float:
        options = self.ort.RunOptions()
        if graph_id is not None:
            options.add_run_config_entry("gpu_graph_id", str(graph_id))
        for _ in range(3):  # warm-up; the first run with a graph id captures it
            self.session.run_with_iobinding(self.binding, options)
        self.binding.synchronize_outputs()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            self.session.run_with_iobinding(self.binding, options)
            self.binding.synchronize_outputs()
            times.append(time.perf_counter() - start)
        return float(np.median(times))


def make_session(ort, path: Path, device: str, graphs: bool = False):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if device == "cpu":
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    provider = ("CUDAExecutionProvider", {"enable_cuda_graph": "1" if graphs else "0"})
    return ort.InferenceSession(str(path), options, providers=[provider])


def weight_bytes(artifact: Path) -> int:
    return (artifact / "weights.bin").stat().st_size


def measure(ort, artifact: Path, args, device: str) -> list[dict]:
    rows = []
    floor = weight_bytes(artifact) / args.bandwidth
    for width in [int(w) for w in args.widths.split(",")]:
        bound = Bound(ort, artifact, width, args.context, device)
        plain = bound.time(args.iters, None)
        graph, error = None, None
        if device == "cuda":
            try:
                bound.session = make_session(ort, artifact / "target.onnx", device, graphs=True)
                bound.binding = _rebind(bound)
                graph = bound.time(args.iters, width)
            except Exception as failure:  # capture may refuse the graph: record why
                error = str(failure)[:500]
        rows.append(dict(width=width, plain_ms=1e3 * plain,
                         graph_ms=None if graph is None else 1e3 * graph,
                         floor_ms=1e3 * floor, graph_error=error))
        print(rows[-1], flush=True)
    return rows


def _rebind(bound: Bound):
    binding = bound.session.io_binding()
    for name, value in bound.values.items():
        binding.bind_ortvalue_input(name, value)
    for arg, value in zip(bound.session.get_outputs(), bound.binding.get_outputs()):
        binding.bind_ortvalue_output(arg.name, value)
    return binding


def _numpy(type_name: str):
    return {"tensor(float)": np.float32, "tensor(float16)": np.float16,
            "tensor(int64)": np.int64}[type_name]


def main() -> None:
    args = parse_args()
    import onnxruntime as ort

    device = "cpu" if args.cpu else "cuda"
    if not args.cpu:
        ort.preload_dlls()
    results = {"device": device, "context": args.context, "config": args.config, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in args.dtypes.split(","):
            artifact = export_model(Path(tmp), dtype, args.max_cells, args.config)
            results["runs"][dtype] = dict(weight_bytes=weight_bytes(artifact),
                                          steps=measure(ort, artifact, args, device))
            args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
