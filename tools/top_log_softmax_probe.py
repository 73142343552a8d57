"""draft_block's tree choices on the CUDA provider, alone: LogSoftmax + TopK (k 4) against
cellspec's TopLogSoftmaxFloat over [16, 16384] float32 logits (a block of 16 rows over the
shipped draft's proposal vocabulary), each run 2,000 times uncaptured through an IOBinding on
device buffers, in turn, twice; prints us per run, the first row's choices (equal in both),
and which op the rewritten draft_block of each float16 SmolLM2 export under /tmp/cellspec-gpu
(tools/gpu_run.sh's work folder) carries. Needs a GPU and the plugin's build.

    python tools/top_log_softmax_probe.py
"""

from __future__ import annotations

import glob
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROWS, COLUMNS, K, RUNS = 16, 16384, 4, 2000


def model(fused: bool) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLUMNS])
    outputs = [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("i", TensorProto.INT64, None)]
    if fused:
        nodes = [helper.make_node("TopLogSoftmaxFloat", ["x"], ["v", "i"], domain="cellspec",
                                  k=K)]
        constants = []
    else:
        nodes = [helper.make_node("LogSoftmax", ["x"], ["l"], axis=1),
                 helper.make_node("TopK", ["l", "k"], ["v", "i"], axis=1)]
        constants = [helper.make_tensor("k", TensorProto.INT64, [1], [K])]
    graph = helper.make_graph(nodes, "t", [x], outputs, initializer=constants)
    return helper.make_model(graph, ir_version=10,
                             opset_imports=[helper.make_opsetid("", 23),
                                            helper.make_opsetid("cellspec", 1)])


def main() -> None:
    import onnxruntime as ort

    from cellspec.artifact import Manifest
    from cellspec.plugins.build import build_library
    from cellspec.runtime.device_sessions import rewritten

    library = str(build_library())
    x = np.random.default_rng(0).standard_normal((ROWS, COLUMNS)).astype(np.float32) * 4
    best: dict[str, float] = {}
    for fused in (False, True, False, True):
        options = ort.SessionOptions()
        options.register_custom_ops_library(library)
        session = ort.InferenceSession(model(fused).SerializeToString(), options,
                                       providers=["CUDAExecutionProvider"])
        binding = session.io_binding()
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
        binding.bind_output("v", "cuda")
        binding.bind_output("i", "cuda")
        for _ in range(50):
            session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        start = time.perf_counter()
        for _ in range(RUNS):
            session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        us = (time.perf_counter() - start) / RUNS * 1e6
        values, ids = (o.numpy() for o in binding.get_outputs())
        name = "TopLogSoftmax" if fused else "LogSoftmax+TopK"
        best[name] = min(best.get(name, float("inf")), us)
        print(f"{name} {us:.1f} us/run", ids[0].tolist(), np.round(values[0], 4).tolist(),
              flush=True)
    print("best us/run", best)
    for folder in map(Path, glob.glob("/tmp/cellspec-gpu/smollm2-float16-*")):
        block = Manifest.load(folder).draft.block_graph
        graph = rewritten(onnx.load(str(folder / block), load_external_data=False), "cell",
                          "row").graph
        print(folder, [n.op_type for n in graph.node
                       if "Top" in n.op_type or "LogSoftmax" in n.op_type])


if __name__ == "__main__":
    main()
