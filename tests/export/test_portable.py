"""The graphs rewritten for TensorRT compute what the fused graphs compute, on ONNX Runtime CPU.

Each check runs the original and the rewritten graph on the same random inputs and compares every
output, to float32 rounding (float16 rounding for a float16 export).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cellspec.artifact import (
    ATTN_MASK,
    ATTN_MASK_WINDOW,
    CELL_TABLE,
    LOGITS_ROWS,
    POSITIONS,
    TOKENS,
)
from cellspec.errors import InvalidArgument
from cellspec.export import ExportConfig, export
from cellspec.export.graph import CONTRIB, OPSET
from cellspec.export.portable import rewrite_for_tensorrt

S, Q, N = 3, 4, 6  # rows, tokens per row, cells read per row
TOLERANCE = {"float32": 1e-5, "float16": 1e-2}


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, session.run(names, feeds)))


def assert_same_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                        tolerance: float = 1e-5) -> onnx.ModelProto:
    """Run `model` and its rewrite; every output equal to `tolerance`. Returns the rewrite."""
    rewritten = rewrite_for_tensorrt(model)
    expected, actual = run(model, feeds), run(rewritten, feeds)
    assert list(actual) == list(expected)
    for name, value in expected.items():
        assert actual[name].shape == value.shape, name
        assert np.isfinite(actual[name]).all(), name
        np.testing.assert_allclose(actual[name].astype(np.float32), value.astype(np.float32),
                                   rtol=tolerance, atol=tolerance, err_msg=name)
    return rewritten


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(CONTRIB, 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def tensor(name: str, dtype: int, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, dims)


def attention_model(heads: int, kv_heads: int, head_dim: int) -> onnx.ModelProto:
    """One Attention node as cellspec emits it: q [S, Q, H * D], k / v [S, N + Q, KV * D]."""
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["out"], name="/attn/Attention",
                            q_num_heads=heads, kv_num_heads=kv_heads, scale=head_dim ** -0.5,
                            softmax_precision=TensorProto.FLOAT)
    f = TensorProto.FLOAT
    inputs = [tensor("q", f, ["S", "Q", heads * head_dim]),
              tensor("k", f, ["S", "T", kv_heads * head_dim]),
              tensor("v", f, ["S", "T", kv_heads * head_dim]),
              tensor("mask", TensorProto.BOOL, ["S", 1, "Q", "T"])]
    return make_model([node], inputs, [tensor("out", f, ["S", "Q", heads * head_dim])])


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (4, 4), (6, 1)])
def test_attention_matches_grouped_heads_and_the_mask(heads, kv_heads):
    rng, d = np.random.default_rng(heads + kv_heads), 8
    mask = rng.random((S, 1, Q, N + Q)) < 0.6
    mask[0, 0, 1, :] = False  # a row that sees nothing: ONNX Runtime gives zeros
    feeds = {"q": rng.standard_normal((S, Q, heads * d), np.float32),
             "k": rng.standard_normal((S, N + Q, kv_heads * d), np.float32),
             "v": rng.standard_normal((S, N + Q, kv_heads * d), np.float32), "mask": mask}
    rewritten = assert_same_outputs(attention_model(heads, kv_heads, d), feeds)
    assert "Attention" not in {n.op_type for n in rewritten.graph.node}
    assert [o.domain for o in rewritten.opset_import] == [""]  # no contrib op left
    assert not run(rewritten, feeds)["out"][0, 1].any()


@pytest.mark.parametrize("has_bias", [False, True])
def test_skip_norm_keeps_its_output_names(has_bias):
    f, h = TensorProto.FLOAT, 16
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), "gamma")]
    inputs = ["x", "skip", "gamma"]
    if has_bias:
        weights.append(numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), "bias"))
        inputs.append("bias")
    node = helper.make_node("SkipSimplifiedLayerNormalization", inputs,
                            ["normed", "", "", "sum"], name="/norm/Skip", domain=CONTRIB,
                            epsilon=1e-5)
    model = make_model([node], [tensor("x", f, ["T", h]), tensor("skip", f, ["T", h])],
                       [tensor("normed", f, ["T", h]), tensor("sum", f, ["T", h])], weights)
    feeds = {n: rng.standard_normal((5, h)).astype(np.float32) for n in ("x", "skip")}
    rewritten = assert_same_outputs(model, feeds)
    assert [n.op_type for n in rewritten.graph.node] == ["Add"] * (1 + has_bias) + [
        "RMSNormalization"]


def random_feeds(model: onnx.ModelProto, vocab: int, max_cells: int) -> dict[str, np.ndarray]:
    """Random step inputs for a target or draft graph of ABI v2: S rows of Q tokens (the block,
    when the graph fixes it), each row reading N random cells; each token sees a random subset of
    its row's cells and tokens, and always itself. Pools and taps: standard normal."""
    rng = np.random.default_rng(0)
    tokens = next((v for v in model.graph.input if v.name == TOKENS), None)
    q = tokens.type.tensor_type.shape.dim[1].dim_value if tokens is not None else 0
    q = q or Q
    sizes = {"S": S, "O": S, "Q": q, "N": N}  # any other named dim is a span, N + Q
    feeds = {}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        shape = [d.dim_value or sizes.get(d.dim_param, N + q) for d in dims]
        dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        feeds[value.name] = rng.standard_normal(shape).astype(dtype)
    itself = np.eye(q, N + q, N, dtype=bool)  # token i is column N + i
    visible = (rng.random((S, 1, q, N + q)) < 0.6) | itself
    step = {TOKENS: rng.integers(0, vocab, (S, q)), POSITIONS: np.tile(N + np.arange(q), (S, 1)),
            CELL_TABLE: rng.integers(0, max_cells, (S, N)), ATTN_MASK: visible,
            ATTN_MASK_WINDOW: visible & (rng.random(visible.shape) < 0.5) | itself,
            LOGITS_ROWS: np.array([0, q + 1, S * q - 1])}
    return feeds | {name: value for name, value in step.items() if name in feeds}


@pytest.mark.parametrize("name, dtype", [("qwen3_gqa", "float32"), ("qwen3_window", "float32"),
                                         ("llama_bias", "float32"), ("qwen3_gqa", "float16")])
def test_exported_target_matches(tiny_checkpoint, tmp_path, name, dtype):
    checkpoint, _ = tiny_checkpoint(name)
    out = tmp_path / "artifact"
    export(checkpoint, out, ExportConfig(dtype=dtype, static_widths=(1, 4), dynamic_width=8,
                                         max_cells=32), progress=False)
    model = onnx.load(str(out / "target.onnx"))
    ops = {n.op_type for n in model.graph.node}
    assert {"Attention", "SkipSimplifiedLayerNormalization"} <= ops  # what is rewritten
    assert_same_outputs(model, random_feeds(model, 256, 32), TOLERANCE[dtype])


@pytest.mark.parametrize("graph", ["draft_block.onnx", "draft_context.onnx"])
def test_exported_draft_graphs_match(dflash_artifact, graph):
    model = onnx.load(str(dflash_artifact / graph))
    assert_same_outputs(model, random_feeds(model, 256, 512))


def test_weights_stay_in_their_file(dflash_artifact):
    model = onnx.load(str(dflash_artifact / "target.onnx"), load_external_data=False)
    before = model.SerializeToString()
    rewritten = rewrite_for_tensorrt(model)
    assert model.SerializeToString() == before  # the input is not changed
    external = {t.name: t for t in model.graph.initializer
                if t.data_location == TensorProto.EXTERNAL}
    assert external  # the weights: references into weights.bin, no data
    for tensor_ in rewritten.graph.initializer:
        if tensor_.name in external:
            assert tensor_ == external[tensor_.name]
            assert not tensor_.raw_data
    outputs = {o.name for o in rewritten.graph.output}
    assert outputs == {o.name for o in model.graph.output}


@pytest.mark.parametrize("op", ["MatMulNBits", "GatherBlockQuantized"])
def test_four_bit_weights_are_refused_by_node(op):
    node = helper.make_node(op, ["x", "w", "scales"], ["y"], name=f"/layers.0/mlp/{op}",
                            domain=CONTRIB)
    f = TensorProto.FLOAT
    model = make_model([node], [tensor(n, f, [4]) for n in ("x", "w", "scales")],
                       [tensor("y", f, [4])])
    with pytest.raises(InvalidArgument, match=rf"node '/layers.0/mlp/{op}' \({op}\): .*int4 "
                                              r"artifacts get no TensorRT engine \(export "
                                              r"float16 or float32 for engines\)"):
        rewrite_for_tensorrt(model)


def test_other_contrib_ops_and_attention_features_are_refused():
    f = TensorProto.FLOAT
    gelu = helper.make_node("FastGelu", ["x"], ["y"], name="/gelu", domain=CONTRIB)
    model = make_model([gelu], [tensor("x", f, [4])], [tensor("y", f, [4])])
    with pytest.raises(InvalidArgument, match=r"node '/gelu' \(com.microsoft.FastGelu\)"):
        rewrite_for_tensorrt(model)
    causal = attention_model(4, 2, 8)
    causal.graph.node[0].attribute.append(helper.make_attribute("is_causal", 1))
    with pytest.raises(InvalidArgument, match=r"'/attn/Attention' \(Attention\): attributes "
                                              r"\['is_causal'\]"):
        rewrite_for_tensorrt(causal)
