"""Nodes per decoder layer of an artifact's target graph, as exported and after ONNX Runtime's
optimisers (the CPU provider's fusions, or the CUDA provider's with --cuda), by op type.

    python tools/count_nodes.py ARTIFACT [ARTIFACT ...] [--cuda]
"""

from __future__ import annotations

import argparse
import collections
import json
import tempfile
from pathlib import Path

import onnx


def count(graph: Path, cuda: bool) -> dict:
    import onnxruntime as ort

    exported = onnx.load(str(graph), load_external_data=False).graph.node
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3
        providers = ["CUDAExecutionProvider"] if cuda else ["CPUExecutionProvider"]
        ort.InferenceSession(str(graph), options, providers=providers,
                             disabled_optimizers=["GatherSliceToSplitFusion"] if cuda else None)
        optimized = onnx.load(options.optimized_model_filepath, load_external_data=False)
    return {"exported": len(exported), "optimized": len(optimized.graph.node),
            "ops": dict(collections.Counter(n.op_type for n in optimized.graph.node)
                        .most_common())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", nargs="+", type=Path)
    parser.add_argument("--cuda", action="store_true")
    args = parser.parse_args()
    for folder in args.artifacts:
        manifest = json.loads((folder / "manifest.json").read_text())
        layers = manifest["model"]["num_layers"]
        result = count(folder / manifest["target"]["graph"], args.cuda)
        print(f"{folder}: {layers} layers; exported {result['exported']} nodes "
              f"({result['exported'] / layers:.1f} per layer), optimized {result['optimized']} "
              f"({result['optimized'] / layers:.1f} per layer)")
        print("  " + ", ".join(f"{op} {n}" for op, n in result["ops"].items()))


if __name__ == "__main__":
    main()
