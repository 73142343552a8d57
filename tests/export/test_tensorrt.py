"""TensorRT engines built ahead of time (TensorRT for RTX, no GPU): files, profiles, failures.

The engines are only built here, never run: this machine has no GPU the engines could run on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cellspec.artifact import WEIGHTS_NAME, TargetMethod
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.export.profiles import GraphProfiles, target_profiles
from cellspec.export.tensorrt import build_engines, compute_capability_name, import_tensorrt

V, H, HEADS, D, MAX_CELLS = 32, 16, 2, 8, 16
TARGET = TargetMethod("target.onnx", static_widths=(1, 2, 4), dynamic_width=8)


@pytest.fixture(scope="module")
def trt():
    return pytest.importorskip("tensorrt_rtx")


def _node(op: str, inputs: list[str], output: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=f"/{output}/{op}", **attrs)


def _save(folder: Path, name: str, nodes, inputs, outputs, initializers=()) -> None:
    graph = helper.make_graph(nodes, Path(name).stem, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    # every float weight in weights.bin; small int64 shape constants stay inline
    onnx.save_model(model, str(folder / name), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=WEIGHTS_NAME, size_threshold=64)


def write_target(folder: Path, span: str = "S") -> None:
    """A one-layer target-like graph with the target ABI's inputs, int64 indices and outputs."""
    rng = np.random.default_rng(0)
    weights = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
               [("embed", (V, H)), ("wq", (HEADS * D, H)), ("wk", (H, HEADS * D)),
                ("wv", (H, HEADS * D)), ("lm_head", (V, H)), ("inv_freq", (D,))]}
    shapes = {"th": [-1, H], "thd": [-1, HEADS, D], "t1": [-1, 1, 1]}
    inits = [numpy_helper.from_array(a, n) for n, a in weights.items()]
    inits += [numpy_helper.from_array(np.array(s, np.int64), n) for n, s in shapes.items()]
    nodes = [
        _node("Gather", ["embed", "tokens"], "emb"), _node("Reshape", ["emb", "th"], "x"),
        _node("Cast", ["positions"], "pos", to=TensorProto.FLOAT),
        _node("Reshape", ["pos", "t1"], "pos3"), _node("Mul", ["pos3", "inv_freq"], "angle"),
        _node("Cos", ["angle"], "cos"),
        _node("Gemm", ["x", "wq"], "q2", transB=1), _node("Reshape", ["q2", "thd"], "q3"),
        _node("MatMul", ["x", "wk"], "k2"), _node("Reshape", ["k2", "thd"], "k3"),
        _node("Mul", ["k3", "cos"], "k_new.0"),
        _node("MatMul", ["x", "wv"], "v2"), _node("Reshape", ["v2", "thd"], "v_new.0"),
        _node("Gather", ["k_pool.0", "cells_read"], "k_read", axis=0),
        _node("Gather", ["v_pool.0", "cells_read"], "v_read", axis=0),
        _node("Concat", ["k_read", "k_new.0"], "k_all", axis=0),
        _node("Concat", ["v_read", "v_new.0"], "v_all", axis=0),
        _node("Transpose", ["q3"], "q", perm=[1, 0, 2]),
        _node("Transpose", ["k_all"], "kt", perm=[1, 2, 0]),
        _node("Transpose", ["v_all"], "vt", perm=[1, 0, 2]),
        _node("MatMul", ["q", "kt"], "scores"), _node("Add", ["scores", "attn_bias"], "biased"),
        _node("Softmax", ["biased"], "probs", axis=-1), _node("MatMul", ["probs", "vt"], "o"),
        _node("Transpose", ["o"], "o2", perm=[1, 0, 2]), _node("Reshape", ["o2", "th"], "h"),
        _node("Gather", ["h", "logits_rows"], "rows", axis=0),
        _node("Gemm", ["rows", "lm_head"], "logits", transB=1),
    ]
    vi = helper.make_tensor_value_info
    pool = [MAX_CELLS, HEADS, D]
    inputs = [vi("tokens", TensorProto.INT64, [1, "T"]), vi("positions", TensorProto.INT64, ["T"]),
              vi("logits_rows", TensorProto.INT64, ["R"]),
              vi("cells_read", TensorProto.INT64, ["N"]),
              vi("attn_bias", TensorProto.FLOAT, ["T", span]),
              vi("k_pool.0", TensorProto.FLOAT, pool), vi("v_pool.0", TensorProto.FLOAT, pool)]
    outputs = [vi("logits", TensorProto.FLOAT, ["R", V]),
               vi("k_new.0", TensorProto.FLOAT, ["T", HEADS, D]),
               vi("v_new.0", TensorProto.FLOAT, ["T", HEADS, D])]
    _save(folder, TARGET.graph, nodes, inputs, outputs, inits)


def write_one_node(folder: Path, name: str, op: str, inputs, output, initializers=()) -> None:
    node = helper.make_node(op, [i.name for i in inputs] + [t.name for t in initializers],
                            [output.name], name=f"/bad/{op}")
    _save(folder, name, [node], inputs, [output], initializers)


def _float(name: str, dims) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def expected_target_profiles() -> list[dict[str, list[list[int]]]]:
    """The profiles `target_profiles` must give TARGET: widths 1, 2, 4 exactly, then 1..8."""
    profiles = []
    for low, high in [(1, 1), (2, 2), (4, 4), (1, 8)]:
        profiles.append({
            "tokens": [[1, low], [1, high], [1, high]],
            "positions": [[low], [high], [high]],
            "logits_rows": [[low], [high], [high]],
            "cells_read": [[0], [MAX_CELLS], [MAX_CELLS]],
            "attn_bias": [[low, low], [high, MAX_CELLS + high], [high, MAX_CELLS + high]],
        })
    return profiles


@pytest.mark.parametrize("span", ["S", "N + T"])
def test_builds_one_engine_per_compute_capability(trt, tmp_path, span):
    write_target(tmp_path, span)
    assert (tmp_path / WEIGHTS_NAME).stat().st_size > V * H * 4  # weights really external
    profiles = target_profiles(tmp_path, TARGET, MAX_CELLS)
    engines = build_engines(tmp_path, [profiles], ["sm80", "8.9"], progress=span == "S")
    assert [e.compute_capability for e in engines] == ["sm80", "sm89"]
    assert [e.path for e in engines] == ["target.sm80.plan", "target.sm89.plan"]
    for engine in engines:
        assert engine.graph == "target.onnx"
        assert (tmp_path / engine.path).stat().st_size > 0
        assert list(engine.profiles) == expected_target_profiles()
    assert not list(tmp_path.glob("*.partial"))


def test_unparsable_graph_is_named_and_nothing_is_written(trt, tmp_path):
    write_target(tmp_path)
    write_one_node(tmp_path, "unique.onnx", "Unique", [_float("x", ["N"])], _float("y", ["M"]))
    graphs = [target_profiles(tmp_path, TARGET, MAX_CELLS),
              GraphProfiles("unique.onnx", ({"x": ((1,), (4,), (8,))},))]
    with pytest.raises(InvalidArtifact, match=r"unique\.onnx: TensorRT cannot parse .*"
                                              r"'/bad/Unique' \(Unique\): UNSUPPORTED_NODE"):
        build_engines(tmp_path, graphs, ["sm80"], progress=False)
    assert not list(tmp_path.glob("*.plan*"))  # not even the target's, built before


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
    graphs = [target_profiles(tmp_path, TARGET, MAX_CELLS)]
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
