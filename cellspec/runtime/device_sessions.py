"""ONNX Runtime sessions for the device backends: Attention rewritten for the provider (or for
cellspec's CellAttention), every node placed on the device or a refusal naming the node."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto

from cellspec.errors import InvalidArgument, InvalidArtifact

QUIET = 4
# Merges the QKV and gate/up Slices back into a Split, whose uneven sizes the CUDA provider
# copies from the host on every call (replayed by every CUDA graph).
DISABLED_OPTIMIZERS = ["GatherSliceToSplitFusion"]

CUDA_KERNEL_GAPS = {TensorProto.BFLOAT16: {"Reciprocal", "ReduceMax", "ArgMax", "CumSum"}}


def unsupported_nodes(model: onnx.ModelProto, gaps: dict[int, set[str]]) -> list[str]:
    """The nodes (name, op, input type) a provider would leave to the CPU: those whose first
    input's element type has no kernel for their op."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in (
        *inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    types |= {t.name: t.data_type for t in inferred.graph.initializer}
    found = []
    for node in inferred.graph.node:
        element = types.get(node.input[0]) if node.input else None
        if node.op_type in gaps.get(element, ()):
            found.append(f"{node.name or '(unnamed)'} ({node.op_type} on "
                         f"{TensorProto.DataType.Name(element).lower()})")
    return found


def _check_placeable(path: Path, providers: list) -> None:
    """Refuse, naming the node, a graph the CUDA provider cannot run whole: rather than let
    ONNX Runtime fall back to the CPU silently (or refuse without naming it)."""
    if providers and providers[0][0] == "CUDAExecutionProvider":
        missing = unsupported_nodes(onnx.load(str(path), load_external_data=False),
                                    CUDA_KERNEL_GAPS)
        if missing:
            raise InvalidArtifact(f"{path.name}: the CUDA provider has no kernel for node "
                                  f"{missing[0]} ({len(missing)} such nodes); export with "
                                  "--dtype float16")


# "grouped": as "cuda" for every dtype (the CPU provider's GroupQueryAttention takes float32:
# the tests check the rewrite's semantics there)
ATTENTION_MODES = ("as-exported", "cell", "cuda", "decomposed", "grouped")
# "cublas": ONNX Runtime's MatMuls; "row" (with "cell"): cellspec's RowMatMul on the tensor
# cores, a row rounded the same whatever the rows beside it (bench/NOTES.md, 2026-12-02 later)
PROJECTION_MODES = ("cublas", "row")
# ops that mode "cell" rewrites in a graph without Attention (the sampler's)
CELL_REWRITTEN = {"CumSum", "TopK"}


def check_modes(attention: str, projections: str) -> None:
    """Refuse, naming it, a mode `load_session` does not know or a pair it cannot run."""
    if attention not in ATTENTION_MODES:
        raise InvalidArgument(f"attention {attention!r}: expected one of {ATTENTION_MODES}")
    if projections not in PROJECTION_MODES:
        raise InvalidArgument(f"projections {projections!r}: expected one of "
                              f"{PROJECTION_MODES}")
    if projections == "row" and attention != "cell":
        raise InvalidArgument("projections 'row' (cellspec's RowMatMul) needs attention 'cell' "
                              f"(its library), not {attention!r}")


def rewritten(model: onnx.ModelProto, attention: str, projections: str = "cublas"
              ) -> onnx.ModelProto | None:
    """`model` as `load_session` runs it (its doc), or None where it runs as exported."""
    check_modes(attention, projections)
    from cellspec.rewrite import (
        attention_for_cuda,
        cell_attention_for_cuda,
        decompose_attention,
        projections_for_cuda,
        sampling_for_cuda,
        top_choices_for_cuda,
    )
    from cellspec.rewrite.graph import without_tree_choices

    ops = {n.op_type for n in model.graph.node}
    rewrites = CELL_REWRITTEN | ({"MatMul", "Gemm"} if projections == "row" else set())
    if attention == "as-exported" or \
            ("Attention" not in ops and not (attention == "cell" and ops & rewrites)):
        return None
    # without CellAttention a backend verifies chains only: no tree outputs (their nodes cost
    # every draft block, asked for or not)
    if attention == "decomposed":
        return without_tree_choices(decompose_attention(model))
    if attention == "grouped":
        return without_tree_choices(attention_for_cuda(model, (TensorProto.FLOAT,
                                                               TensorProto.FLOAT16)))
    if attention == "cuda":
        return without_tree_choices(attention_for_cuda(model))
    # the tree choices first: their rule reads types that ONNX's shape inference cannot carry
    # past cellspec's ops
    model = top_choices_for_cuda(model)
    if "Attention" in ops:
        model = cell_attention_for_cuda(model)
    model = sampling_for_cuda(model)
    return projections_for_cuda(model) if projections == "row" else model


def load_session(path: Path, providers: list, attention: str = "as-exported",
                 projections: str = "cublas"):
    """A session on `path`, its Attention nodes rewritten first (cellspec/rewrite/) unless
    `attention` is "as-exported": "cuda" gives each the form the CUDA provider has a kernel
    for, "decomposed" standard ops, "cell" cellspec's CellAttention (its library built first,
    or PluginUnavailable saying what is missing), and in "cell" the full sorts and cumulative
    sums of any graph (the sampler's) cellspec's SortDescending and SequentialCumSum, a draft
    block's LogSoftmax + TopK (its tree choices) one TopLogSoftmax, and with
    `projections` "row" the float16/bfloat16 projections cellspec's RowMatMul. A rewritten
    graph is loaded from memory, its weights still read from the artifact's weights.bin."""
    check_modes(attention, projections)
    if attention == "as-exported" or not path.is_file():
        return _open_session(path, providers)
    model = rewritten(onnx.load(str(path), load_external_data=False), attention, projections)
    if model is None:
        return _open_session(path, providers)
    library = None
    if attention == "cell":
        from cellspec.plugins.build import build_library

        library = build_library()
    return _open_session(path, providers, model.SerializeToString(), library)


def _open_session(path: Path, providers: list, serialized: bytes | None = None,
                  library: Path | None = None):
    """A session on the graph at `path`, or on `serialized` (its rewrite) reading the weights
    beside `path`; `library`: a custom-op library its nodes call."""
    import onnxruntime as ort

    if not path.is_file():
        raise InvalidArtifact(f"{path}: graph file missing")
    _check_placeable(path, providers)
    options = ort.SessionOptions()
    if library is not None:
        options.register_custom_ops_library(str(library))
    options.log_severity_level = QUIET
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if providers != ["CPUExecutionProvider"]:  # every node on the device, or a refusal
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if serialized is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(path.parent))
    try:
        return ort.InferenceSession(serialized or str(path), options, providers=providers,
                                    disabled_optimizers=DISABLED_OPTIMIZERS)
    except Exception as error:  # ORT's own error types; it names the nodes it could not place
        raise InvalidArtifact(f"{path}: ONNX Runtime cannot load it on {providers[0]}: "
                              f"{error}") from error
