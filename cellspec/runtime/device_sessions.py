"""ONNX Runtime sessions for the device backends: Attention rewritten for the provider (or for
cellspec's CellAttention), every node placed on the device or a refusal naming the node."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
from onnx import TensorProto

from cellspec.errors import InvalidArgument, InvalidArtifact

QUIET = 4
# Merges the QKV and gate/up Slices back into a Split, whose uneven sizes the CUDA provider
# copies from the host on every call (replayed by every CUDA graph).
DISABLED_OPTIMIZERS = ["GatherSliceToSplitFusion"]
# ONNX Runtime (1.27 on) folds a node on initializers only where its output is at most this
# many bytes, unless the session sets another limit; a rewrite's weight layouts (RowMatMul's
# tiled and transposed weights) must always fold, or they run at every step
FOLD_KEY = "optimization.constant_folding_max_output_size_in_bytes"
DEFAULT_FOLD_LIMIT = 1 << 30

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
    return _open_session(path, providers, model.SerializeToString(), library,
                         fold_limit(model))


def fold_limit(model: onnx.ModelProto) -> int:
    """The bytes a folded node's output may take in `model`'s session: ONNX Runtime's default
    (1 GiB), or the largest initializer's size where that is more. A rewrite folds only layouts
    of single initializers (a Transpose, a Reshape, a Gather of rows), each the size of the
    weight it reads; under the default an LM head of more than 1 GiB (Qwen3-8B's 151,936 x
    4,096 in float16: 1.24 GB) stayed a Transpose that ran at every step (0.6 ms on the H200,
    bench/NOTES.md, 2026-12-04 twelfth sitting)."""
    largest = max((_tensor_bytes(t) for t in model.graph.initializer), default=0)
    return max(DEFAULT_FOLD_LIMIT, largest)


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    """An initializer's size in bytes from its shape and element type (its data may be
    external: only the header is read); 0 for a type ONNX does not know (ONNX Runtime refuses
    the graph then, naming it)."""
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    except KeyError:
        return 0
    return math.prod(tensor.dims) * itemsize


def session_options(providers: list, library: Path | None = None,
                    weights: Path | None = None, folds: int = DEFAULT_FOLD_LIMIT):
    """ONNX Runtime's options for a device session: every optimisation, nodes larger than
    `folds` bytes left unfolded, no CPU fallback off the CPU, `library`'s ops registered, and
    a graph loaded from memory reading its external weights in `weights`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry(FOLD_KEY, str(folds))
    if library is not None:
        options.register_custom_ops_library(str(library))
    options.log_severity_level = QUIET
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if providers != ["CPUExecutionProvider"]:  # every node on the device, or a refusal
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if weights is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(weights))
    return options


def _open_session(path: Path, providers: list, serialized: bytes | None = None,
                  library: Path | None = None, folds: int = DEFAULT_FOLD_LIMIT):
    """A session on the graph at `path`, or on `serialized` (its rewrite) reading the weights
    beside `path`; `library`: a custom-op library its nodes call; `folds`: the largest output
    in bytes ONNX Runtime folds (fold_limit)."""
    import onnxruntime as ort

    if not path.is_file():
        raise InvalidArtifact(f"{path}: graph file missing")
    _check_placeable(path, providers)
    options = session_options(providers, library, path.parent if serialized else None, folds)
    try:
        return ort.InferenceSession(serialized or str(path), options, providers=providers,
                                    disabled_optimizers=DISABLED_OPTIMIZERS)
    except Exception as error:  # ORT's own error types; it names the nodes it could not place
        raise InvalidArtifact(f"{path}: ONNX Runtime cannot load it on {providers[0]}: "
                              f"{error}") from error
