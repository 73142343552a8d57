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
    model = _model({"a": ["S", "Q"], "pool": [4, 2], "mask": ["S", 1, "Q", "N + Q"]})
    assert dynamic_dims(model) == {"a": ["S", "Q"], "mask": ["S", 1, "Q", "N + Q"]}


def test_unnamed_dynamic_dim_is_refused():
    model = _model({"a": [None]})
    with pytest.raises(InvalidArtifact, match="input a dim 0 is dynamic but unnamed"):
        dynamic_dims(model)


def test_profile_evaluates_sums_and_products_per_bound():
    inputs = {"mask": ["S", 1, "Q", "N + Q"], "logits": ["O * 4", 3], "x": [2, "Q"]}
    profile = make_profile(inputs, {"S": (1, 2, 2), "Q": (1, 4, 8), "N": (0, 16, 16),
                                    "O": (1, 2, 3)})
    assert profile == {"mask": ((1, 1, 1, 1), (2, 1, 4, 20), (2, 1, 8, 24)),
                       "logits": ((4, 3), (8, 3), (12, 3)),
                       "x": ((2, 1), (2, 4), (2, 8))}


@pytest.mark.parametrize("dim, message", [("O", r"dim 'O' has no range"),
                                          ("N - Q", r"not built of names, integers, \+ and \*"),
                                          ("N +", "is not a name or sum")])
def test_profile_refuses_dims_it_cannot_bound(dim, message):
    with pytest.raises(InvalidArgument, match=message):
        make_profile({"x": [dim]}, {"Q": (1, 1, 1), "N": (1, 1, 1)})


def test_graph_profiles_refuses_min_above_max():
    with pytest.raises(InvalidArgument, match="g.onnx profile 0 input x"):
        GraphProfiles("g.onnx", ({"x": ((4,), (2,), (8,))},))
    with pytest.raises(InvalidArgument, match="no optimization profiles"):
        GraphProfiles("g.onnx", ())


def test_target_ranges_static_widths_then_dynamic():
    target = TargetMethod("t.onnx", (1, 2), 8, batch_buckets=(1, 4, 16))
    ranges = target_ranges(target, max_context=64)
    cells = (0, 64, 64)
    assert ranges == [{"S": (1, 16, 16), "Q": (1, 1, 1), "R": (1, 16, 16), "N": cells},
                      {"S": (1, 16, 16), "Q": (2, 2, 2), "R": (1, 32, 32), "N": cells},
                      {"S": (1, 16, 16), "Q": (1, 8, 8), "R": (1, 128, 128), "N": cells}]
    assert len(target_ranges(TargetMethod("t.onnx", (1, 2), 0), max_context=64)) == 2
    with pytest.raises(InvalidArgument, match="max_context 0, need >= 1"):
        target_ranges(target, max_context=0)


@pytest.mark.parametrize("s, q, n, span", [("S", "Q", "N", "N + Q"),
                                           ("rows", "width", "cells", "span")])
def test_target_profiles_follow_the_graphs_own_names(tmp_path, s, q, n, span):
    _write(tmp_path, "t.onnx", {"tokens": [s, q], "positions": [s, q], "cell_table": [s, n],
                                "attn_mask": [s, 1, q, span], "logits_rows": ["R"],
                                "k_pool.0": [64, 16]})
    target = TargetMethod("t.onnx", (2,), 8, batch_buckets=(1, 2, 4))
    profiles = target_profiles(tmp_path, target, max_context=64)
    assert profiles.graph == "t.onnx"
    assert profiles.profiles[0] == {
        "tokens": ((1, 2), (4, 2), (4, 2)), "positions": ((1, 2), (4, 2), (4, 2)),
        "cell_table": ((1, 0), (4, 64), (4, 64)),
        "attn_mask": ((1, 1, 2, 2), (4, 1, 2, 66), (4, 1, 2, 66)),
        "logits_rows": ((1,), (8,), (8,))}
    assert profiles.profiles[1]["attn_mask"] == ((1, 1, 1, 1), (4, 1, 8, 72), (4, 1, 8, 72))
    assert profiles.profiles[1]["logits_rows"] == ((1,), (32,), (32,))


def test_make_graph_profiles_keeps_the_order_given(tmp_path):
    _write(tmp_path, "ctx.onnx", {"hidden": ["S", "Q", 32], "positions": ["S", "Q"]})
    ranges = [{"S": (1, 1, 1), "Q": (q, q, q)} for q in (4, 1, 2)]
    profiles = make_graph_profiles(tmp_path, "ctx.onnx", ranges)
    assert [p["positions"][0] for p in profiles.profiles] == [(1, 4), (1, 1), (1, 2)]


def test_missing_graph_is_named(tmp_path):
    with pytest.raises(InvalidArtifact, match="nope.onnx: graph file not found"):
        make_graph_profiles(tmp_path, "nope.onnx", [{}])
