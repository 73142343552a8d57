"""What `ort-cuda` does around cellspec's CUDA CellAttention op, on the CPU: the graph rewrite
(which nodes it replaces and how it wires them), the library's build (cached per source, and
each missing piece named), and the refusal when it cannot be built. The op's arithmetic is tested on
the GPU (tests/gpu/test_cell_attention.py)."""

import stat

import onnx
import pytest

from cellspec.artifact import Manifest
from cellspec.errors import CellspecError
from cellspec.plugins import build
from cellspec.plugins.build import PluginUnavailable, build_library
from cellspec.rewrite import CELLSPEC_DOMAIN, cell_attention_for_cuda
from cellspec.runtime.ort_device import _make_session


def graph_path(artifact, method):
    manifest = Manifest.load(artifact)
    name = manifest.target.graph if method == "target" else manifest.draft.block_graph
    return artifact / name


def load_graph(artifact, method):
    return onnx.load(str(graph_path(artifact, method)), load_external_data=False)


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("method,by_position", [("target", 1), ("draft_block", 0)])
def test_each_attention_over_cells_becomes_one_cell_attention(dflash_artifact, method,
                                                              by_position):
    model = load_graph(dflash_artifact, method)
    attentions = [n for n in model.graph.node if n.op_type == "Attention"]
    producers = {o: n for n in model.graph.node for o in n.output}
    rewritten = cell_attention_for_cuda(model)
    ops = [n for n in rewritten.graph.node if n.domain == CELLSPEC_DOMAIN]
    assert [n.name for n in ops] == [n.name for n in attentions]
    assert {n.op_type for n in ops} == {"CellAttentionFloat"}  # the tiny artifact is float32
    for op, old in zip(ops, attentions):
        keys, values = (producers[name] for name in old.input[1:3])  # the Concats
        pools = [producers[c.input[0]].input[0] for c in (keys, values)]
        assert list(op.input) == [old.input[0], keys.input[1], values.input[1], *pools,
                                  "cell_table", old.input[3], "positions"]
        assert op.output[0] == old.output[0]
        old_attrs = attrs(old)
        assert attrs(op) == {"num_heads": old_attrs["q_num_heads"],
                             "kv_num_heads": old_attrs["kv_num_heads"],
                             "scale": pytest.approx(old_attrs["scale"]),
                             "by_position": by_position}
    # the cell gathers and concats are gone, nothing else changed
    assert not any(n.op_type == "Gather" and "cell_table" in n.input
                   for n in rewritten.graph.node)
    read = {i for n in attentions for i in n.input[1:3]}  # the Concats of cells and new
    kept = [n.name for n in model.graph.node if n.op_type != "Attention"
            and n.output[0] not in read and not (n.op_type == "Gather" and "cell_table" in n.input)]
    assert [n.name for n in rewritten.graph.node if n.domain != CELLSPEC_DOMAIN] == kept
    assert rewritten.graph.output == model.graph.output
    assert (CELLSPEC_DOMAIN, 1) in {(o.domain, o.version) for o in rewritten.opset_import}


def test_attention_not_over_cells_is_decomposed(dflash_artifact):
    model = load_graph(dflash_artifact, "target")
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    concat = next(n for n in model.graph.node if n.output[0] == attention.input[1])
    concat.input[0], concat.input[1] = concat.input[1], concat.input[0]  # [new ; cells]
    rewritten = cell_attention_for_cuda(model)
    names = [n.name for n in rewritten.graph.node]
    assert attention.name not in names
    assert f"{attention.name}/scores/MatMul" in names  # decomposed into standard ops
    assert sum(n.domain == CELLSPEC_DOMAIN for n in rewritten.graph.node) == \
        sum(n.op_type == "Attention" for n in model.graph.node) - 1


def test_heads_wider_than_the_kernels_are_decomposed(dflash_artifact):
    model = load_graph(dflash_artifact, "target")
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    scale = next(a for a in attention.attribute if a.name == "scale")
    scale.f = 256 ** -0.5  # a head of 256 lanes: more than the kernels' 128 threads
    names = [n.name for n in cell_attention_for_cuda(model).graph.node]
    assert f"{attention.name}/scores/MatMul" in names


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    """A cache, an include folder with the header and a fake nvcc (a script that writes its -o
    file, logging each call) on PATH."""
    include, bin_dir = tmp_path / "include", tmp_path / "bin"
    include.mkdir()
    bin_dir.mkdir()
    (include / build.HEADER).write_text("// stand-in\n")
    nvcc = bin_dir / "nvcc"
    nvcc.write_text('#!/bin/sh\necho "$@" >> "${0%/*}/calls"\n'
                    'while [ "$1" != "-o" ]; do shift; done; echo built > "$2"\n')
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CELLSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CELLSPEC_ORT_INCLUDE", str(include))
    monkeypatch.setenv("PATH", str(bin_dir))
    return tmp_path


def test_the_library_is_built_once_per_source(plugin_env, monkeypatch):
    first = build_library()
    assert first.read_text() == "built\n"
    assert first.parent == plugin_env / "cache" / "plugins"
    assert build_library() == first
    calls = (plugin_env / "bin" / "calls").read_text().splitlines()
    assert len(calls) == 1
    assert f"-I{plugin_env / 'include'}" in calls[0].split()
    assert str(build.SOURCE) in calls[0].split()
    changed = plugin_env / "changed.cu"
    changed.write_text("// another source\n")
    monkeypatch.setattr(build, "SOURCE", changed)
    assert build_library() != first  # a new source, a new library
    assert len((plugin_env / "bin" / "calls").read_text().splitlines()) == 2


def test_a_failed_build_names_the_compiler_error_and_leaves_nothing(plugin_env):
    (plugin_env / "bin" / "nvcc").write_text('#!/bin/sh\necho "error: no such type" >&2\nexit 2\n')
    with pytest.raises(PluginUnavailable, match="no such type"):
        build_library()
    assert list((plugin_env / "cache" / "plugins").iterdir()) == []


def test_missing_header_and_compiler_are_named(plugin_env, monkeypatch):
    """(Only for a build: a library of this source in the cache needs neither.)"""
    built = build_library()
    monkeypatch.setenv("PATH", str(plugin_env / "nowhere"))
    assert build_library() == built
    built.unlink()
    monkeypatch.setenv("PATH", str(plugin_env / "bin"))
    monkeypatch.setenv("CELLSPEC_ORT_INCLUDE", str(plugin_env / "nowhere"))
    with pytest.raises(PluginUnavailable, match="onnxruntime_cxx_api.h.*CELLSPEC_ORT_INCLUDE"):
        build_library()
    monkeypatch.setenv("CELLSPEC_ORT_INCLUDE", str(plugin_env / "include"))
    monkeypatch.setenv("PATH", str(plugin_env / "nowhere"))
    monkeypatch.setenv("CUDA_HOME", str(plugin_env / "nowhere"))
    with pytest.raises(PluginUnavailable, match="nvcc"):
        build_library()


def test_cell_attention_without_its_library_is_refused_with_the_reason(plugin_env, monkeypatch,
                                                                        dflash_artifact):
    monkeypatch.setenv("PATH", str(plugin_env / "nowhere"))
    monkeypatch.setenv("CUDA_HOME", str(plugin_env / "nowhere"))
    with pytest.raises(CellspecError, match="nvcc"):
        _make_session(graph_path(dflash_artifact, "target"), ["CPUExecutionProvider"], "cell")
