"""Optimization profiles from a graph's named dims (no TensorRT needed)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from cellspec.artifact import TargetMethod
from cellspec.errors import InvalidArgument, InvalidArtifact
from cellspec.export.profiles import (
    GraphProfiles,
    dynamic_dims,
    make_graph_profiles,
    make_profile,
    target_profiles,
    target_ranges,
)


def _model(inputs: dict[str, list]) -> onnx.ModelProto:
    """Identity per input: a graph whose only content is its input declarations."""
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs.items()]
    outputs = [helper.make_tensor_value_info(f"{n}_out", TensorProto.FLOAT, d)
               for n, d in inputs.items()]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in inputs]
    return helper.make_model(helper.make_graph(nodes, "g", values, outputs))


def _write(folder: Path, name: str, inputs: dict[str, list]) -> None:
    onnx.save(_model(inputs), str(folder / name))


def test_dynamic_dims_lists_inputs_with_a_named_dim():
    model = _model({"a": [1, "T"], "pool": [4, 2], "bias": ["T", "N + T"]})
    assert dynamic_dims(model) == {"a": [1, "T"], "bias": ["T", "N + T"]}


def test_unnamed_dynamic_dim_is_refused():
    model = _model({"a": [None]})
    with pytest.raises(InvalidArtifact, match="input a dim 0 is dynamic but unnamed"):
        dynamic_dims(model)


def test_profile_evaluates_sums_and_products_per_bound():
    inputs = {"bias": ["T", "N + T"], "block": ["O * 4", 3], "x": [2, "T"]}
    profile = make_profile(inputs, {"T": (1, 4, 8), "N": (0, 16, 16), "O": (1, 2, 3)})
    assert profile == {"bias": ((1, 1), (4, 20), (8, 24)),
                       "block": ((4, 3), (8, 3), (12, 3)),
                       "x": ((2, 1), (2, 4), (2, 8))}


@pytest.mark.parametrize("dim, message", [("Q", r"dim 'Q' has no range"),
                                          ("N - T", r"not built of names, integers, \+ and \*"),
                                          ("N +", "is not a name or sum")])
def test_profile_refuses_dims_it_cannot_bound(dim, message):
    with pytest.raises(InvalidArgument, match=message):
        make_profile({"x": [dim]}, {"T": (1, 1, 1), "N": (1, 1, 1)})


def test_graph_profiles_refuses_min_above_max():
    with pytest.raises(InvalidArgument, match="g.onnx profile 0 input x"):
        GraphProfiles("g.onnx", ({"x": ((4,), (2,), (8,))},))
    with pytest.raises(InvalidArgument, match="no optimization profiles"):
        GraphProfiles("g.onnx", ())


def test_target_ranges_static_widths_then_dynamic():
    ranges = target_ranges(TargetMethod("t.onnx", (1, 2), 8), max_cells=64)
    assert ranges == [{"T": (1, 1, 1), "R": (1, 1, 1), "N": (0, 64, 64)},
                      {"T": (2, 2, 2), "R": (2, 2, 2), "N": (0, 64, 64)},
                      {"T": (1, 8, 8), "R": (1, 8, 8), "N": (0, 64, 64)}]
    assert len(target_ranges(TargetMethod("t.onnx", (1, 2), 0), max_cells=64)) == 2


@pytest.mark.parametrize("t, n, span", [("T", "N", "S"), ("width", "cells", "cells + width")])
def test_target_profiles_follow_the_graphs_own_names(tmp_path, t, n, span):
    _write(tmp_path, "t.onnx", {"tokens": [1, t], "positions": [t], "logits_rows": ["R"],
                                "cells_read": [n], "attn_bias": [t, span],
                                "k_pool.0": [64, 2, 8]})
    profiles = target_profiles(tmp_path, TargetMethod("t.onnx", (2,), 8), max_cells=64)
    assert profiles.graph == "t.onnx"
    assert profiles.profiles[0] == {
        "tokens": ((1, 2), (1, 2), (1, 2)), "positions": ((2,), (2,), (2,)),
        "logits_rows": ((2,), (2,), (2,)), "cells_read": ((0,), (64,), (64,)),
        "attn_bias": ((2, 2), (2, 66), (2, 66))}
    assert profiles.profiles[1]["attn_bias"] == ((1, 1), (8, 72), (8, 72))


def test_make_graph_profiles_keeps_the_order_given(tmp_path):
    _write(tmp_path, "ctx.onnx", {"taps": ["C", 32], "positions": ["C"]})
    profiles = make_graph_profiles(tmp_path, "ctx.onnx", [{"C": (c, c, c)} for c in (4, 1, 2)])
    assert [p["positions"][0] for p in profiles.profiles] == [(4,), (1,), (2,)]


def test_missing_graph_is_named(tmp_path):
    with pytest.raises(InvalidArtifact, match="nope.onnx: graph file not found"):
        make_graph_profiles(tmp_path, "nope.onnx", [{}])
