"""TensorRT engines built ahead of time (TensorRT for RTX, no GPU): files, profiles, failures.

The engines are only built here, never run: this machine has no GPU the engines could run on.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cellspec.artifact import (
    ATTN_MASK,
    CELL_TABLE,
    LOGITS,
    LOGITS_ROWS,
    POSITIONS,
    TOKENS,
    WEIGHTS_NAME,
    TargetMethod,
    k_new,
    k_pool,
    v_new,
    v_pool,
)
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.export.graph import (
    CONTRIB,
    GraphBuilder,
    make_attention,
    make_cell_kv,
    make_embedding,
    make_linear,
    make_lm_head,
    make_rms_norm,
    make_rope,
    make_rope_caches,
    make_skip_rms_norm,
    make_split,
)
from cellspec.export.profiles import GraphProfiles, target_profiles
from cellspec.export.tensorrt import build_engines, compute_capability_name, import_tensorrt

V, H, HEADS, KV_HEADS, D, MAX_CELLS, MAX_CONTEXT = 32, 16, 4, 2, 8, 16, 12
TARGET = TargetMethod("target.onnx", static_widths=(1, 2, 4), dynamic_width=8,
                      batch_buckets=(1, 2))


@pytest.fixture(scope="module")
def trt():
    return pytest.importorskip("tensorrt_rtx")


def _save(folder: Path, name: str, nodes, inputs, outputs, initializers=()) -> None:
    graph = helper.make_graph(nodes, Path(name).stem, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    _save_model(folder, name, model)


def _save_model(folder: Path, name: str, model: onnx.ModelProto) -> None:
    # every float weight in weights.bin; small int64 shape constants stay inline
    onnx.save_model(model, str(folder / name), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=WEIGHTS_NAME, size_threshold=64)


def write_target(folder: Path, span: str = "N + Q") -> None:
    """A one-layer target of graph ABI v2: its inputs and outputs, with the ops TensorRT gets
    rewritten (opset-23 Attention with grouped kv heads, SkipSimplifiedLayerNormalization) and
    those it takes as they are (RMSNormalization, RotaryEmbedding)."""
    rng = np.random.default_rng(0)
    g = GraphBuilder("target")
    for name, shape in [("embed", (V, H)), ("norm", (H,)), ("qkv", (H, (HEADS + 2 * KV_HEADS) * D)),
                        ("o_proj", (HEADS * D, H)), ("final_norm", (H,)), ("lm_head", (V, H))]:
        g.weight(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
    g.input(TOKENS, "int64", ["S", "Q"])
    g.input(POSITIONS, "int64", ["S", "Q"])
    g.input(CELL_TABLE, "int64", ["S", "N"])
    g.input(ATTN_MASK, "bool", ["S", 1, "Q", span])
    g.input(LOGITS_ROWS, "int64", ["R"])
    for pool in (k_pool(0), v_pool(0)):
        g.input(pool, "float32", [MAX_CELLS, KV_HEADS * D])
    rope = make_rope_caches(g, 1.0 / 10000 ** (np.arange(0, D, 2) / D), MAX_CONTEXT + 8)
    x = make_embedding(g, "embed", TOKENS)
    normed = make_rms_norm(g, x, "norm", 1e-5, "/input_layernorm")
    qkv = make_linear(g, normed, "qkv", "/attn/qkv_proj")
    q, k, _ = make_split(g, qkv, [HEADS * D, KV_HEADS * D, KV_HEADS * D], "/attn/qkv_proj",
                         [None, None, v_new(0)])
    q = make_rope(g, q, POSITIONS, rope, HEADS, "/attn/q_rope")
    k = make_rope(g, k, POSITIONS, rope, KV_HEADS, "/attn/k_rope", out=k_new(0))
    keys = make_cell_kv(g, k_pool(0), CELL_TABLE, k, "/attn/keys")
    values = make_cell_kv(g, v_pool(0), CELL_TABLE, v_new(0), "/attn/values")
    out = make_attention(g, q, keys, values, ATTN_MASK, HEADS, KV_HEADS, D, "/attn")
    attn = make_linear(g, out, "o_proj", "/attn/o_proj")
    normed, _ = make_skip_rms_norm(g, attn, x, "final_norm", 1e-5, "/norm")
    flat = g.node("Reshape", [normed, g.const([-1, H])], name="/logits_rows/Flat")
    rows = g.node("Gather", [flat, LOGITS_ROWS], name="/logits_rows/Gather", axis=0)
    g.output(make_lm_head(g, rows, "lm_head"), LOGITS, "float32", ["R", V])
    for name in (k_new(0), v_new(0)):
        g.output(name, name, "float32", ["S", "Q", KV_HEADS * D])
    _save_model(folder, TARGET.graph, g.make_model())


def write_one_node(folder: Path, name: str, op: str, inputs, output, initializers=()) -> None:
    node = helper.make_node(op, [i.name for i in inputs] + [t.name for t in initializers],
                            [output.name], name=f"/bad/{op}")
    _save(folder, name, [node], inputs, [output], initializers)


def _float(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def expected_target_profiles() -> list[dict[str, list[list[int]]]]:
    """The profiles `target_profiles` must give TARGET: S in 1..2 rows; widths 1, 2, 4 exactly,
    then 1..8; R up to S * Q; N in 0..MAX_CONTEXT cells per row."""
    profiles = []
    for low, high in [(1, 1), (2, 2), (4, 4), (1, 8)]:
        span = [low, MAX_CONTEXT + high, MAX_CONTEXT + high]
        profiles.append({
            "tokens": [[1, low], [2, high], [2, high]],
            "positions": [[1, low], [2, high], [2, high]],
            "cell_table": [[1, 0], [2, MAX_CONTEXT], [2, MAX_CONTEXT]],
            "attn_mask": [[1, 1, low, span[0]], [2, 1, high, span[1]], [2, 1, high, span[2]]],
            "logits_rows": [[1], [2 * high], [2 * high]],
        })
    return profiles


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("span", ["span", "N + Q"])
def test_builds_one_engine_per_compute_capability(trt, tmp_path, span):
    write_target(tmp_path, span)
    assert (tmp_path / WEIGHTS_NAME).stat().st_size > V * H * 4  # weights really external
    before = digests(tmp_path)
    profiles = target_profiles(tmp_path, TARGET, MAX_CONTEXT)
    engines = build_engines(tmp_path, [profiles], ["sm80", "8.9"], progress=span == "span")
    assert [e.compute_capability for e in engines] == ["sm80", "sm89"]
    assert [e.path for e in engines] == ["target.sm80.plan", "target.sm89.plan"]
    for engine in engines:
        assert engine.graph == "target.onnx"  # the graph's file, not the rewrite's
        assert (tmp_path / engine.path).stat().st_size > (tmp_path / WEIGHTS_NAME).stat().st_size
        assert list(engine.profiles) == expected_target_profiles()
    assert not list(tmp_path.glob("*.partial"))
    after = digests(tmp_path)
    assert {name: after[name] for name in before} == before  # graph and weights untouched
    assert sorted(after.keys() - before.keys()) == ["target.sm80.plan", "target.sm89.plan"]


def test_the_rewrite_is_parsed_beside_the_graph_then_removed(trt, tmp_path, monkeypatch):
    write_target(tmp_path)
    parsed = []

    def parse_from_file(self, path):
        model = onnx.load(path)  # reads weights.bin through the rewrite's references
        parsed.append((path, {n.op_type for n in model.graph.node}))
        return original(self, path)

    original = trt.OnnxParser.parse_from_file
    monkeypatch.setattr(trt.OnnxParser, "parse_from_file", parse_from_file)
    build_engines(tmp_path, [target_profiles(tmp_path, TARGET, MAX_CONTEXT)], ["sm80"],
                  progress=False)
    [(path, ops)] = parsed
    assert path == str(tmp_path / "target.trt.onnx")
    assert {"Attention", "SkipSimplifiedLayerNormalization"}.isdisjoint(ops)
    assert {"MatMul", "Softmax", "RMSNormalization", "RotaryEmbedding"} <= ops
    assert not (tmp_path / "target.trt.onnx").exists()


def test_unparsable_graph_is_named_and_nothing_is_written(trt, tmp_path):
    write_target(tmp_path)
    write_one_node(tmp_path, "unique.onnx", "Unique", [_float("x", ["N"])], _float("y", ["M"]))
    graphs = [target_profiles(tmp_path, TARGET, MAX_CONTEXT),
              GraphProfiles("unique.onnx", ({"x": ((1,), (4,), (8,))},))]
    with pytest.raises(InvalidArtifact, match=r"unique\.onnx: TensorRT cannot parse .*"
                                              r"'/bad/Unique' \(Unique\): UNSUPPORTED_NODE"):
        build_engines(tmp_path, graphs, ["sm80"], progress=False)
    assert not list(tmp_path.glob("*.plan*"))  # not even the target's, built before
    assert not list(tmp_path.glob("*.trt.onnx"))  # the rewrites are removed on failure too


def test_four_bit_graph_is_refused_before_any_build(trt, tmp_path):
    write_target(tmp_path)
    node = helper.make_node("MatMulNBits", ["x", "w", "scales"], ["y"], name="/lm_head/MatMulNBits",
                            domain=CONTRIB, K=16, N=16, bits=4, block_size=16)
    inputs = [_float("x", ["T", 16]), _float("w", [16, 1, 8]), _float("scales", [16])]
    model = helper.make_model(helper.make_graph([node], "int4", inputs, [_float("y", ["T", 16])]),
                              opset_imports=[helper.make_opsetid("", 23),
                                             helper.make_opsetid(CONTRIB, 1)])
    onnx.save(model, str(tmp_path / "int4.onnx"))
    graphs = [target_profiles(tmp_path, TARGET, MAX_CONTEXT),
              GraphProfiles("int4.onnx", ({"x": ((1, 16), (4, 16), (8, 16))},))]
    with pytest.raises(InvalidArgument, match=r"int4\.onnx: node '/lm_head/MatMulNBits' "
                                              r"\(MatMulNBits\): .*int4 artifacts get no "
                                              r"TensorRT engine \(export float16 or float32"):
        build_engines(tmp_path, graphs, ["sm80"], progress=False)
    assert not list(tmp_path.glob("*.plan*")) and not list(tmp_path.glob("*.trt.onnx"))


def test_inconsistent_static_shapes_are_named(trt, tmp_path):
    weight = numpy_helper.from_array(np.ones((5, 4), np.float32), "w")
    write_one_node(tmp_path, "matmul.onnx", "MatMul", [_float("x", ["T", 3])],
                   _float("y", ["T", 4]), [weight])
    graphs = [GraphProfiles("matmul.onnx", ({"x": ((1, 3), (2, 3), (4, 3))},))]
    with pytest.raises(InvalidArtifact,
                       match=r"matmul\.onnx: .*'/bad/MatMul' \(MatMul\).* = 3 .* = 5 but"):
        build_engines(tmp_path, graphs, ["sm89"], progress=False)
    assert not list(tmp_path.glob("*.plan*"))


def test_profile_the_builder_refuses_is_named_by_index(trt, tmp_path):
    # a [T] + b [N] parses; it builds only where T and N can agree. TensorRT is lenient: it
    # builds profiles {T=N=2} and {T=2, N=3} together (the second could never run), yet
    # refuses {T=N=1} with {T=2, N=3}, and {T=2, N=3} alone.
    write_one_node(tmp_path, "add.onnx", "Add", [_float("a", ["T"]), _float("b", ["N"])],
                   _float("y", ["T"]))
    same = {"a": ((1,), (1,), (1,)), "b": ((1,), (1,), (1,))}
    clash = {"a": ((2,), (2,), (2,)), "b": ((3,), (3,), (3,))}
    graphs = [GraphProfiles("add.onnx", (same, clash))]
    with pytest.raises(InvalidArtifact, match=r"add\.onnx: .* sm80 with profile 1 \{a: \[\[2\], "
                                              r".*/bad/Add: broadcast dimensions"):
        build_engines(tmp_path, graphs, ["sm80"], progress=False)
    assert not list(tmp_path.glob("*.plan*"))


@pytest.mark.parametrize("profile, message", [
    ({"a": ((2,), (2,), (2,))}, r"profile 0: no shapes for dynamic inputs \['b'\]"),
    ({"a": ((2,),) * 3, "b": ((2,),) * 3, "c": ((2,),) * 3}, r"profile 0: \['c'\] not inputs"),
    ({"a": ((2, 1),) * 3, "b": ((2,),) * 3}, r"profile 0: a shape \[2, 1\] does not fit"),
])
def test_profile_that_does_not_fit_the_graph_is_refused(trt, tmp_path, profile, message):
    write_one_node(tmp_path, "add.onnx", "Add", [_float("a", ["T"]), _float("b", ["N"])],
                   _float("y", ["T"]))
    with pytest.raises(InvalidArgument, match=message):
        build_engines(tmp_path, [GraphProfiles("add.onnx", (profile,))], ["sm80"], progress=False)


@pytest.mark.parametrize("value", ["sm90", "9.0", "sm100"])
def test_unsupported_compute_capability_is_refused(trt, tmp_path, value):
    write_target(tmp_path)
    graphs = [target_profiles(tmp_path, TARGET, MAX_CONTEXT)]
    with pytest.raises(InvalidArgument, match=r"not supported .* supported: \['sm120'"):
        build_engines(tmp_path, graphs, [value], progress=False)


@pytest.mark.parametrize("value, name", [("sm80", "sm80"), ("SM_89", "sm89"), ("8.6", "sm86"),
                                         ("12.0", "sm120"), ("121", "sm121")])
def test_compute_capability_names(value, name):
    assert compute_capability_name(value) == name


def test_missing_tensorrt_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt_rtx", None)  # import now raises ImportError
    with pytest.raises(InvalidArgument, match=r"pip install 'cellspec\[tensorrt\]'"):
        import_tensorrt()
