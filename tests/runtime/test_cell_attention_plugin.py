"""What `ort-cuda` does around cellspec's CUDA CellAttention op, on the CPU: the graph rewrite
(which nodes it replaces and how it wires them), the library's build (cached per source, and
each missing piece named), and the refusal when it cannot be built. The op's arithmetic is tested on
the GPU (tests/gpu/test_cell_attention.py)."""

import os
import shutil
import stat

import numpy as np
import onnx
import pytest

from cellspec.artifact import Manifest
from cellspec.errors import CellspecError, InvalidArgument
from cellspec.plugins import build
from cellspec.plugins.build import PluginUnavailable, build_library
from cellspec.rewrite import CELLSPEC_DOMAIN, cell_attention_for_cuda, projections_for_cuda
from cellspec.rewrite.kernels import rotary_row_order
from cellspec.runtime.device_sessions import load_session

ALL_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def graph_path(artifact, method):
    manifest = Manifest.load(artifact)
    name = manifest.target.graph if method == "target" else manifest.draft.block_graph
    return artifact / name


def load_graph(artifact, method):
    return onnx.load(str(graph_path(artifact, method)), load_external_data=False)


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("method,by_position", [("target", 1), ("draft_block", 0)])
def test_each_attention_over_cells_becomes_one_rotary_cell_attention(dflash_artifact, method,
                                                                     by_position):
    """Qwen3: Slice(qkv) -> head norm -> RotaryEmbedding for q and k, and v's Slice, feed
    Attention over Concat(Gather(pool, cell_table), new): one CellNormRotaryAttention reading
    qkv, writing the new keys and values the graph returns; the rest of the graph unchanged but
    for SwiGlu (below)."""
    model = load_graph(dflash_artifact, method)
    attentions = [n for n in model.graph.node if n.op_type == "Attention"]
    producers = {o: n for n in model.graph.node for o in n.output}
    rewritten = cell_attention_for_cuda(model)
    ops = [n for n in rewritten.graph.node if n.op_type.startswith("Cell")]
    assert [n.name for n in ops] == [n.name for n in attentions]
    assert {n.op_type for n in ops} == {"CellNormRotaryAttentionFloat"}  # a float32 Qwen3
    replaced = set()
    for op, old in zip(ops, attentions):
        keys, values = (producers[name] for name in old.input[1:3])  # the Concats
        pools = [producers[c.input[0]].input[0] for c in (keys, values)]
        k_rope, q_rope = producers[keys.input[1]], producers[old.input[0]]
        v_slice = producers[values.input[1]]
        norms = []
        for rope in (q_rope, k_rope):
            back = producers[rope.input[0]]  # Reshape back from [S, Q, heads, D]
            norm = producers[back.input[0]]
            split = producers[norm.input[0]]
            norms.append(norm.input[1])
            epsilon = attrs(norm)["epsilon"]
            replaced |= {rope.name, back.name, norm.name, split.name,
                         producers[split.input[0]].name}
        replaced.add(v_slice.name)
        assert list(op.input) == [v_slice.input[0], *q_rope.input[1:3], *pools, "cell_table",
                                  old.input[3], "positions", *norms]
        assert list(op.output[:3]) == [old.output[0], keys.input[1], values.input[1]]
        old_attrs = attrs(old)
        assert attrs(op) == {"num_heads": old_attrs["q_num_heads"],
                             "kv_num_heads": old_attrs["kv_num_heads"],
                             "scale": pytest.approx(old_attrs["scale"]),
                             "by_position": by_position, "epsilon": pytest.approx(epsilon)}
    # the cell gathers and concats, the slices, norms and rotations are gone
    read = {i for n in attentions for i in n.input[1:3]}
    swiglu = [n for n in rewritten.graph.node if n.op_type == "SwiGluFloat"]
    # each MLP's Slice x 2, Sigmoid, Mul x 2 -> SwiGlu(gate_up) named as the last Mul
    assert [(n.name, list(n.input), list(n.output)) for n in swiglu] == [
        (n.name, [producers[producers[n.input[1]].input[0]].output[0]], list(n.output))
        for n in model.graph.node if n.op_type == "Mul" and n.name.endswith("/mlp/Mul")]
    gone = {n.name for n in model.graph.node if n.output[0] in read or n.name in replaced
            or (n.op_type == "Gather" and "cell_table" in n.input)}
    mlp_parts = {n.name for n in model.graph.node if "/mlp/" in n.name
                 and n.op_type in ("Slice", "Sigmoid", "Mul")}
    kept = [n.name for n in model.graph.node if n.op_type != "Attention"
            and n.name not in gone | mlp_parts]
    assert [n.name for n in rewritten.graph.node if n.domain != CELLSPEC_DOMAIN] == kept
    assert rewritten.graph.output == model.graph.output
    assert (CELLSPEC_DOMAIN, 1) in {(o.domain, o.version) for o in rewritten.opset_import}


def expand(model: onnx.ModelProto) -> onnx.ModelProto:
    """The rewritten `model` with each cellspec op replaced by standard ops that compute what
    the op is defined to compute (cell_attention.cu's header): a CPU check of the rewrite's
    wiring, independent of the CUDA kernels (tests/gpu/test_cell_attention.py checks those)."""
    from onnx import helper, numpy_helper

    nodes, consts = [], []

    def const(values, name):
        consts.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def swiglu(x: str, out: str, n: str) -> list:
        half = f"{n}/x_half"
        return [helper.make_node("Shape", [x], [f"{n}/shape"], start=-1),
                helper.make_node("Div", [f"{n}/shape", const([2], f"{n}/two")], [half]),
                helper.make_node("Slice", [x, const([0], f"{n}/zero"), half,
                                           const([-1], f"{n}/axis")], [f"{n}/gate"]),
                helper.make_node("Slice", [x, half, const([1 << 40], f"{n}/end"),
                                           const([-1], f"{n}/axis2")], [f"{n}/up"]),
                helper.make_node("Sigmoid", [f"{n}/gate"], [f"{n}/sig"]),
                helper.make_node("Mul", [f"{n}/gate", f"{n}/sig"], [f"{n}/silu"]),
                helper.make_node("Mul", [f"{n}/silu", f"{n}/up"], [out])]

    producers = {o: node for node in model.graph.node for o in node.output}

    def row_matmul(x: str, w: str, out: str, n: str, order=None) -> list:
        """x @ w^T, w [N, K] or tiled [N / 8, K / 32, 8, 32] (then its rows in `order`, if
        given, put back in place)."""
        source = producers.get(w)
        if source is None or source.op_type != "Transpose" or len(attrs(source)["perm"]) < 4:
            return [helper.make_node("Transpose", [w], [f"{n}/w"], perm=[1, 0]),
                    helper.make_node("MatMul", [x, f"{n}/w"], [out])]
        # [N / 8, K / 32, 8, 32] -> [N / 8, 8, K / 32, 32] -> [N, K], or two sets
        # [N / 16, K / 32, 2, 8, 32] -> [2, N / 16, 8, K / 32, 32] -> [N, K]
        sets = len(attrs(source)["perm"]) == 5
        untiled = [helper.make_node("Transpose", [w], [f"{n}/blocks"],
                                    perm=[2, 0, 3, 1, 4] if sets else [0, 2, 1, 3]),
                   helper.make_node("Shape", [f"{n}/blocks"], [f"{n}/dims"]),
                   helper.make_node("Gather", [f"{n}/dims", const([3, 4] if sets else [2, 3],
                                                                  f"{n}/kk")],
                                    [f"{n}/k_parts"]),
                   helper.make_node("ReduceProd", [f"{n}/k_parts"], [f"{n}/k"], keepdims=1),
                   helper.make_node("Concat", [const([-1], f"{n}/minus"), f"{n}/k"],
                                    [f"{n}/nk"], axis=0),
                   helper.make_node("Reshape", [f"{n}/blocks", f"{n}/nk"], [f"{n}/w_rows"])]
        rows = f"{n}/w_rows"
        if order is not None:
            untiled.append(helper.make_node("Gather", [rows, const(np.argsort(order),
                                                                   f"{n}/back")],
                                            [f"{n}/w_back"], axis=0))
            rows = f"{n}/w_back"
        return untiled + [helper.make_node("Transpose", [rows], [f"{n}/w"], perm=[1, 0]),
                          helper.make_node("MatMul", [x, f"{n}/w"], [out])]

    def rotary(qkv, cos, sin, positions, heads, kv_heads, d, norms, outputs, n) -> list:
        """q, k rotated (after their head norms, if any) and v of qkv, as outputs' names."""
        out, parts = [], []
        edges = np.cumsum([0, heads * d, kv_heads * d, kv_heads * d])
        for k, (start, end) in enumerate(zip(edges[:-1], edges[1:])):
            parts.append(f"{n}/part{k}")
            out.append(helper.make_node(
                "Slice", [qkv, const([start], f"{n}/s{k}"), const([end], f"{n}/e{k}"),
                          const([-1], f"{n}/a{k}")], [parts[-1]]))
        for k, (count, weight) in enumerate(zip((heads, kv_heads), norms)):
            out += [helper.make_node("Reshape", [parts[k], const([0, 0, count, d], f"{n}/r{k}")],
                                     [f"{n}/split{k}"]),
                    helper.make_node("RMSNormalization", [f"{n}/split{k}", weight],
                                     [f"{n}/normed{k}"], axis=-1, epsilon=a["epsilon"],
                                     stash_type=1),
                    helper.make_node("Reshape", [f"{n}/normed{k}",
                                                 const([0, 0, count * d], f"{n}/b{k}")],
                                     [f"{n}/joined{k}"])]
            parts[k] = f"{n}/joined{k}"
        return out + [
            helper.make_node("RotaryEmbedding", [parts[0], cos, sin, positions], [outputs[0]],
                             num_heads=heads, interleaved=0),
            helper.make_node("RotaryEmbedding", [parts[1], cos, sin, positions], [outputs[1]],
                             num_heads=kv_heads, interleaved=0),
            helper.make_node("Identity", [parts[2]], [outputs[2]])]

    def attention(q, k_new, v_new, k_pool, v_pool, table, mask, out, n) -> list:
        """q's attention over [cells ; new keys and values] under mask."""
        nodes, kv = [], []
        for which, pool, new in (("k", k_pool, k_new), ("v", v_pool, v_new)):
            nodes += [helper.make_node("Gather", [pool, table], [f"{n}/{which}_cells"]),
                      helper.make_node("Concat", [f"{n}/{which}_cells", new],
                                       [f"{n}/{which}_all"], axis=1)]
            kv.append(f"{n}/{which}_all")
        return nodes + [helper.make_node("Attention", [q, *kv, mask], [out],
                                         q_num_heads=a["num_heads"],
                                         kv_num_heads=a["kv_num_heads"], scale=a["scale"],
                                         softmax_precision=onnx.TensorProto.FLOAT)]

    # a RowMatMulRotary's head size: its CellAttention's (which reads its q) scale
    head_dims = {node.input[0]: round(attrs(node)["scale"] ** -2) for node in model.graph.node
                 if node.op_type.startswith("CellAttention")}
    for node in model.graph.node:
        a, n = attrs(node), node.name
        if node.op_type.startswith("SwiGlu"):
            nodes += swiglu(node.input[0], node.output[0], n)
        elif node.op_type.startswith("RowMatMulSwiGlu"):
            nodes += row_matmul(*node.input, f"{n}/product", n)
            nodes += swiglu(f"{n}/product", node.output[0], f"{n}/glu")
        elif node.op_type.startswith("RowMatMulRotary"):
            x, w, cos, sin, positions = node.input
            d = head_dims[node.output[0]]
            nodes += row_matmul(x, w, f"{n}/product", n,
                                rotary_row_order(a["num_heads"], a["kv_num_heads"], d))
            nodes += rotary(f"{n}/product", cos, sin, positions, a["num_heads"],
                            a["kv_num_heads"], d, [], node.output[:3], n)
        elif node.op_type.startswith("RowMatMul"):
            nodes += row_matmul(*node.input, node.output[0], n)
        elif "RotaryAttention" in node.op_type:
            qkv, cos, sin, k_pool, v_pool, table, mask, positions = node.input[:8]
            q = f"{n}/q_rotated"
            nodes += rotary(qkv, cos, sin, positions, a["num_heads"], a["kv_num_heads"],
                            round(a["scale"] ** -2), node.input[8:10],
                            [q, node.output[1], node.output[2]], n)
            nodes += attention(q, node.output[1], node.output[2], k_pool, v_pool, table, mask,
                               node.output[0], n)
        elif node.op_type.startswith("CellAttention"):
            nodes += attention(*node.input[:7], node.output[0], n)
        elif node.op_type.startswith("SequentialCumSumUntil"):
            # the op's sums may be +inf anywhere past the first rank whose exclusive sum reaches
            # the limit (after its tile, on the device): here every one is, the most the
            # graph reading them must withstand
            x, limit = node.input
            consts.append(numpy_helper.from_array(np.array(np.inf, np.float32), f"{n}/inf"))
            nodes += [helper.make_node("CumSum", [x, const(-1, f"{n}/axis")], [f"{n}/sums"]),
                      helper.make_node("Sub", [f"{n}/sums", x], [f"{n}/exclusive"]),
                      helper.make_node("GreaterOrEqual", [f"{n}/exclusive", limit],
                                       [f"{n}/reached"]),
                      helper.make_node("Cast", [f"{n}/reached"], [f"{n}/reached_f"],
                                       to=onnx.TensorProto.FLOAT),
                      helper.make_node("CumSum", [f"{n}/reached_f", const(-1, f"{n}/axis2")],
                                       [f"{n}/before"], exclusive=1),
                      helper.make_node("Greater", [f"{n}/before",
                                                   f"{n}/zero_f"], [f"{n}/past"]),
                      helper.make_node("Where", [f"{n}/past", f"{n}/inf", f"{n}/sums"],
                                       list(node.output))]
            consts.append(numpy_helper.from_array(np.array(0.0, np.float32), f"{n}/zero_f"))
        elif node.op_type.startswith("SequentialCumSum"):
            nodes.append(helper.make_node("CumSum", [node.input[0], const(-1, f"{n}/axis")],
                                          list(node.output)))
        elif node.op_type.startswith("TopLogSoftmax"):  # TopK of the row's LogSoftmax
            nodes += [helper.make_node("LogSoftmax", [node.input[0]], [f"{n}/logp"], axis=-1),
                      helper.make_node("TopK", [f"{n}/logp", const([a["k"]], f"{n}/k")],
                                       list(node.output), axis=-1)]
        elif node.op_type.startswith("SortDescending"):  # a TopK of the whole last axis
            nodes += [helper.make_node("Shape", [node.input[0]], [f"{n}/k"], start=-1),
                      helper.make_node("TopK", [node.input[0], f"{n}/k"],
                                       list(node.output[:2]))]
        else:
            nodes.append(node)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.node[:]
    result.graph.node.extend(nodes)
    result.graph.initializer.extend(consts)
    return result


@pytest.fixture(scope="module")
def llama_artifact(tmp_path_factory):
    """A tiny random Llama (no head norms: CellRotaryAttention), float32."""
    from cellspec.export import ExportConfig, export
    from tests.conftest import make_tiny_model

    root = tmp_path_factory.mktemp("llama")
    make_tiny_model("llama_gqa").save_pretrained(root / "hf")
    export(root / "hf", root / "artifact", ExportConfig(static_widths=(1, 4), dynamic_width=0,
                                                       max_context=128, max_cells=512),
           progress=False)
    return root / "artifact"


@pytest.mark.parametrize("which,op", [("dflash_artifact", "CellNormRotaryAttentionFloat"),
                                      ("llama_artifact", "CellAttentionFloat")])
def test_the_rewritten_graph_computes_what_the_exported_one_does(request, which, op):
    """The target with its fused ops expanded back to their definitions gives the exported
    graph's logits, keys and values (on the CPU): the rewrite feeds each op the right tensors."""
    import onnxruntime as ort

    path = graph_path(request.getfixturevalue(which), "target")
    model = onnx.load(str(path))  # with its weights
    rewritten = projections_for_cuda(cell_attention_for_cuda(model), ALL_FLOATS)
    assert {n.op_type for n in rewritten.graph.node if n.op_type.startswith("Cell")} == {op}
    types = [n.op_type for n in rewritten.graph.node]
    layers = sum(n.op_type == "Attention" for n in model.graph.node)
    rotary = layers if op == "CellAttentionFloat" else 0  # the qkv projection's rotation fused
    assert (types.count("RowMatMulFloat"), types.count("RowMatMulSwiGluFloat"),
            types.count("RowMatMulRotaryFloat")) == \
        (sum(n.op_type in ("MatMul", "Gemm") for n in model.graph.node) - layers - rotary,
         layers, rotary)
    assert "SwiGluFloat" not in types
    expanded = expand(rewritten)
    assert not any(n.domain == CELLSPEC_DOMAIN for n in expanded.graph.node)
    rng = np.random.default_rng(0)
    feeds, types = {}, {"tokens": np.int64, "positions": np.int64, "cell_table": np.int64,
                        "logits_rows": np.int64}
    S, Q, N = 2, 3, 6
    for value in model.graph.input:
        name = value.name
        if name.startswith(("k_pool", "v_pool")):
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
            feeds[name] = rng.standard_normal(dims).astype(np.float32)
        elif name == "tokens":
            feeds[name] = rng.integers(0, 200, (S, Q))
        elif name == "positions":
            feeds[name] = np.array([[4, 5, 6], [2, 3, 0]])
        elif name == "cell_table":
            feeds[name] = rng.integers(1, 500, (S, N))
        elif name.startswith("attn_mask"):
            mask = np.zeros((S, 1, Q, N + Q), bool)
            mask[0, 0, :, :4] = True
            mask[1, 0, :2, :2] = True
            mask[:, 0, :, N:] = np.tril(np.ones((Q, Q), bool))
            mask[1, 0, 2, :] = False
            mask[1, 0, 2, N + 2] = True  # a padding token sees itself
            feeds[name] = mask
        elif name == "logits_rows":
            feeds[name] = np.array([0, 4])
        else:
            raise AssertionError(f"unexpected input {name}")
    feeds = {k: v.astype(types.get(k, v.dtype)) for k, v in feeds.items()}
    outputs = [o.name for o in model.graph.output]
    want = ort.InferenceSession(model.SerializeToString()).run(outputs, feeds)
    got = ort.InferenceSession(expanded.SerializeToString()).run(outputs, feeds)
    for name, a, b in zip(outputs, want, got):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6, err_msg=name)


def weight_read(model: onnx.ModelProto, name: str) -> np.ndarray:
    """The value of `name`: an initializer, or the Transposes, Reshapes and Gathers of
    initializers that ONNX Runtime folds at load, evaluated in numpy."""
    from onnx import numpy_helper

    initializers = {i.name: i for i in model.graph.initializer}
    if name in initializers:
        return numpy_helper.to_array(initializers[name])
    node = next(n for n in model.graph.node if name in n.output)
    x = weight_read(model, node.input[0])
    if node.op_type == "Transpose":
        return x.transpose(attrs(node)["perm"])
    if node.op_type == "Reshape":
        return x.reshape(weight_read(model, node.input[1]))
    assert node.op_type == "Gather", node.op_type
    return np.take(x, weight_read(model, node.input[1]), axis=attrs(node).get("axis", 0))


def untiled(w: np.ndarray) -> np.ndarray:
    """A tiled RowMatMul weight [N / 8, K / 32, 8, 32] (or RowMatMulSwiGlu's [N / 16, K / 32, 2,
    8, 32]) as [N, K]."""
    blocks, chunks = w.shape[:2]
    if w.ndim == 5:
        return w.transpose(2, 0, 3, 1, 4).reshape(blocks * 16, chunks * 32)
    return w.transpose(0, 2, 1, 3).reshape(blocks * 8, chunks * 32)


def test_projections_become_row_matmuls_of_tiled_weights(llama_artifact):
    """Each MatMul by a weight initializer [K, N] -> RowMatMul(x, w^T tiled [N / 8, K / 32, 8,
    32]) through a Reshape and a Transpose of the initializer (one chain per weight, folded at
    load), a weight read by two MatMuls through one Transpose [N, K] instead, the tied LM
    head's Gemm(x, embedding, transB=1) -> RowMatMul(x, embedding) (the embedding's Gather
    also reads it, so it keeps its layout); MatMuls of two activations, Gemms that are not
    x @ w^T, and weights of types not asked for stay."""
    model = load_graph(llama_artifact, "target")
    initializers = {i.name for i in model.graph.initializer}
    weighted = [n for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in initializers]
    head = next(n for n in model.graph.node if n.op_type == "Gemm")
    assert weighted and head.input[1] in initializers
    assert projections_for_cuda(model) == model  # float32: not by default
    shared = onnx.helper.make_node("MatMul", [weighted[0].input[0], weighted[0].input[1]],
                                   ["again"], name="again")  # a second reader of one weight
    product = onnx.helper.make_node("MatMul", ["again", "again"], ["square"], name="square")
    flipped = onnx.helper.make_node("Gemm", [head.input[0], head.input[1]], ["not_t"],
                                    name="not_t", transA=1, transB=1)
    model.graph.node.extend([shared, product, flipped])
    rewritten = projections_for_cuda(model, ALL_FLOATS)
    nodes = {n.name: n for n in rewritten.graph.node}
    full = onnx.load(str(graph_path(llama_artifact, "target")))  # with the weights' values
    values = {i.name: onnx.numpy_helper.to_array(i) for i in full.graph.initializer}
    rewritten_values = onnx.ModelProto()
    rewritten_values.CopyFrom(rewritten)
    del rewritten_values.graph.initializer[:]
    rewritten_values.graph.initializer.extend(
        [*full.graph.initializer,
         *[i for i in rewritten.graph.initializer if i.name not in values]])
    for node in [*weighted, shared]:
        row = nodes[node.name]
        assert (row.op_type, row.domain) == ("RowMatMulFloat", CELLSPEC_DOMAIN)
        assert row.input[0] == node.input[0] and list(row.output) == list(node.output)
        w = weight_read(rewritten_values, row.input[1])
        if node.input[1] == weighted[0].input[1]:  # read twice: one Transpose for both
            assert row.input[1] == f"{node.input[1]}/T"
            np.testing.assert_array_equal(w, values[node.input[1]].T)
        else:
            K, N = values[node.input[1]].shape
            assert row.input[1] == f"{node.input[1]}/tiled" and w.shape == (N // 8, K // 32, 8, 32)
            np.testing.assert_array_equal(untiled(w), values[node.input[1]].T)
    assert [n.input[0] for n in rewritten.graph.node if n.op_type == "Transpose"
            and n.input[0] in initializers] == [weighted[0].input[1]]
    assert list(nodes[head.name].input) == list(head.input)
    assert nodes[head.name].op_type == "RowMatMulFloat"
    assert nodes["square"] == product and nodes["not_t"] == flipped
    order = [n.name for n in rewritten.graph.node]
    made = {o: n.name for n in rewritten.graph.node for o in n.output}
    assert all(order.index(made[i]) < order.index(n.name)
               for n in rewritten.graph.node for i in n.input if i in made)
    assert (CELLSPEC_DOMAIN, 1) in {(o.domain, o.version) for o in rewritten.opset_import}


def tiny_projection(op_inputs: dict, weights: dict, op: str = "MatMul", **attributes):
    """A graph of one node `op` (x and the weights by name) over float16 initializers."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node(op, list(op_inputs), ["y"], name="p", **attributes)], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, None)],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT16, None)],
        initializer=[onnx.numpy_helper.from_array(w, name) for name, w in weights.items()])
    return onnx.helper.make_model(graph)


@pytest.mark.parametrize("K,N,tiled", [(64, 24, True), (48, 24, False), (64, 20, False)])
def test_a_weight_is_tiled_only_where_its_k_and_n_fit_the_tiles(K, N, tiled):
    """K a multiple of 32 and N of 8: tiled; otherwise the Transpose as before. The input graph
    is left as it was, and a rewritten one has nothing more to tile."""
    w = np.arange(K * N, dtype=np.float16).reshape(K, N)
    model = tiny_projection({"x": 0, "w": 0}, {"w": w})
    before = model.SerializeToString()
    rewritten = projections_for_cuda(model)
    assert model.SerializeToString() == before  # the caller's graph as it was
    again = projections_for_cuda(rewritten)  # nothing left to rewrite
    assert [n.input[1] for n in again.graph.node if n.name == "p"] == \
        [n.input[1] for n in rewritten.graph.node if n.name == "p"]
    row = next(n for n in rewritten.graph.node if n.name == "p")
    got = weight_read(rewritten, row.input[1])
    if tiled:
        assert row.input[1] == "w/tiled"
        np.testing.assert_array_equal(untiled(got), w.T)
    else:
        assert row.input[1] == "w/T"
        np.testing.assert_array_equal(got, w.T)


def test_a_swiglu_projection_tiles_gate_and_up_side_by_side():
    """RowMatMulSwiGlu's weight [K, 2 I] -> [I / 8, K / 32, 2, 8, 32]: tile t, chunk c holds gate
    rows 8 t .. 8 t + 7 then the same up rows, each chunk's 32 k."""
    K, inner = 64, 16
    w = np.arange(K * 2 * inner, dtype=np.float16).reshape(K, 2 * inner)
    model = tiny_projection({"x": 0, "w": 0}, {"w": w})
    model.graph.node[0].output[0] = "up"
    model.graph.node.append(onnx.helper.make_node("SwiGluFloat16", ["up"], ["y"], name="glu",
                                                  domain=CELLSPEC_DOMAIN))
    rewritten = projections_for_cuda(model)
    (row,) = [n for n in rewritten.graph.node if n.op_type == "RowMatMulSwiGluFloat16"]
    got = weight_read(rewritten, row.input[1])
    assert row.input[1] == "w/tiled" and got.shape == (inner // 8, K // 32, 2, 8, 32)
    np.testing.assert_array_equal(got[1, 0, 1, 2], w[:32, inner + 8 + 2])  # up row 10, chunk 0
    np.testing.assert_array_equal(untiled(got), w.T)


def test_a_rotary_projection_tiles_its_rows_in_the_kernels_order():
    """RowMatMulRotary's tiled weight holds the rows of w^T in rotary_row_order: each tile of
    a q or k head's 8 outputs the 4 rotation pairs (d, d + D / 2) its lanes sum."""
    order = rotary_row_order(2, 1, 16)
    half = 8
    assert list(order[:8]) == [0, half, 1, half + 1, 2, half + 2, 3, half + 3]
    assert list(order[8:16]) == [4, half + 4, 5, half + 5, 6, half + 6, 7, half + 7]
    assert list(order[16:24]) == [16, 16 + half, 17, 17 + half, 18, 18 + half, 19, 19 + half]
    assert sorted(order) == list(range(64)) and list(order[48:]) == list(range(48, 64))
    assert list(rotary_row_order(1, 1, 24)[:8]) == [0, 12, 1, 13, 2, 14, 3, 15]
    assert list(rotary_row_order(1, 1, 24)[16:24]) == [8, 20, 9, 21, 10, 22, 11, 23]


def product_read_twice(llama_artifact, op: str):
    """The llama target after cell_attention_for_cuda, its nodes of type `op` (at least two)
    and the MatMuls whose products they read; the second product also read by an Identity."""
    model = cell_attention_for_cuda(load_graph(llama_artifact, "target"))
    readers = [n for n in model.graph.node if n.op_type == op]
    producers = {o: n for n in model.graph.node for o in n.output}
    products = [producers[n.input[0]] for n in readers]
    assert len(readers) > 1 and all(p.op_type == "MatMul" for p in products)
    model.graph.node.append(onnx.helper.make_node("Identity", [products[1].output[0]],
                                                  ["product_again"], name="reader"))
    return model, readers, products


def test_a_swiglu_of_a_row_matmul_becomes_one_op_unless_the_product_is_read_elsewhere(
        llama_artifact):
    model, swiglus, products = product_read_twice(llama_artifact, "SwiGluFloat")
    rewritten = projections_for_cuda(model, ALL_FLOATS)
    nodes = {n.name: n for n in rewritten.graph.node}
    fused = nodes[products[0].name]
    assert fused.op_type == "RowMatMulSwiGluFloat" and swiglus[0].name not in nodes
    assert list(fused.input) == [products[0].input[0], f"{products[0].input[1]}/tiled"]
    assert list(fused.output) == [swiglus[0].output[0], f"{products[0].name}/scratch"]
    order = [n.name for n in rewritten.graph.node]
    readers = [n.name for n in rewritten.graph.node if swiglus[0].output[0] in n.input]
    assert all(order.index(fused.name) < order.index(r) for r in readers)
    assert nodes[products[1].name].op_type == "RowMatMulFloat"  # its product is read twice
    assert nodes[swiglus[1].name].op_type == "SwiGluFloat"


def test_a_rotary_cell_attention_of_a_row_matmul_takes_the_rotation_into_the_projection(
        llama_artifact, dflash_artifact):
    """RowMatMul(x, w) -> CellRotaryAttention: RowMatMulRotary(x, w, cos, sin, positions) giving
    the attention's rotated q, k_new and v_new, then CellAttention on them and the cells, both
    where the attention was; not where another node reads the product, nor with head norms."""
    model, attentions, projections = product_read_twice(llama_artifact,
                                                        "CellRotaryAttentionFloat")
    rewritten = projections_for_cuda(model, ALL_FLOATS)
    nodes = {n.name: n for n in rewritten.graph.node}
    fused, attention = nodes[projections[0].name], nodes[attentions[0].name]
    old = attentions[0]
    assert (fused.op_type, attention.op_type) == ("RowMatMulRotaryFloat", "CellAttentionFloat")
    assert list(fused.input) == [projections[0].input[0], f"{projections[0].input[1]}/tiled",
                                 old.input[1], old.input[2], "positions"]
    assert list(fused.output) == [old.output[3], old.output[1], old.output[2],
                                  f"{projections[0].name}/scratch"]
    assert list(attention.input) == [old.output[3], old.output[1], old.output[2],
                                     *old.input[3:8]]
    assert list(attention.output) == [old.output[0], old.output[4]]
    old_attrs = attrs(old)
    assert attrs(fused) == {k: old_attrs[k] for k in ("num_heads", "kv_num_heads")}
    assert attrs(attention) == old_attrs
    order = [n.name for n in rewritten.graph.node]
    assert order.index(fused.name) + 1 == order.index(attention.name)
    # the second layer's product is read twice: its projection and rotary attention stay
    assert nodes[projections[1].name].op_type == "RowMatMulFloat"
    assert nodes[attentions[1].name].op_type == "CellRotaryAttentionFloat"
    qwen3 = projections_for_cuda(cell_attention_for_cuda(load_graph(dflash_artifact, "target")),
                                 ALL_FLOATS)
    types = {n.op_type for n in qwen3.graph.node}
    assert "CellNormRotaryAttentionFloat" in types and "RowMatMulRotaryFloat" not in types


def test_a_slice_read_elsewhere_keeps_its_rotation_and_the_plain_cell_op(dflash_artifact):
    """When another node also reads what the fusion would remove (here v's Slice), the
    attention becomes the plain CellAttention and the slices and rotations stay."""
    model = load_graph(dflash_artifact, "target")
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    producers = {o: n for n in model.graph.node for o in n.output}
    v_new = producers[attention.input[2]].input[1]
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        producers[v_new].input[0] if producers[v_new].op_type != "Slice" else v_new,
        onnx.TensorProto.FLOAT, None))
    extra = onnx.helper.make_node("Identity", [v_new], ["v_again"], name="reader")
    model.graph.node.append(extra)
    model.graph.output.append(onnx.helper.make_tensor_value_info("v_again",
                                                                  onnx.TensorProto.FLOAT, None))
    rewritten = cell_attention_for_cuda(model)
    op = next(n for n in rewritten.graph.node if n.name == attention.name)
    assert op.op_type == "CellAttentionFloat"
    assert producers[v_new].name in {n.name for n in rewritten.graph.node}
    others = [n for n in rewritten.graph.node if n.op_type.startswith("Cell")
              and n.name != attention.name]
    assert others and all(n.op_type == "CellNormRotaryAttentionFloat" for n in others)


def test_attention_not_over_cells_is_decomposed(dflash_artifact):
    model = load_graph(dflash_artifact, "target")
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    concat = next(n for n in model.graph.node if n.output[0] == attention.input[1])
    concat.input[0], concat.input[1] = concat.input[1], concat.input[0]  # [new ; cells]
    rewritten = cell_attention_for_cuda(model)
    names = [n.name for n in rewritten.graph.node]
    assert attention.name not in names
    assert f"{attention.name}/scores/MatMul" in names  # decomposed into standard ops
    assert sum(n.op_type.startswith("Cell") for n in rewritten.graph.node) == \
        sum(n.op_type == "Attention" for n in model.graph.node) - 1


def test_heads_wider_than_the_kernels_are_decomposed(dflash_artifact):
    model = load_graph(dflash_artifact, "target")
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    scale = next(a for a in attention.attribute if a.name == "scale")
    scale.f = 256 ** -0.5  # a head of 256 lanes: more than the kernels' 128 threads
    names = [n.name for n in cell_attention_for_cuda(model).graph.node]
    assert f"{attention.name}/scores/MatMul" in names


@pytest.mark.parametrize("method", ["target", "draft_block"])
def test_cell_attention_reads_its_cells_only_from_the_graphs_inputs(dflash_artifact, method):
    """The op's overlapped launch reads the cell table, the mask and the positions before it
    waits for the step's previous kernel (pair_kernel, mma_chunk_kernel): in the rewritten graphs
    they and the pools are the graph's inputs, which no node writes."""
    model = load_graph(dflash_artifact, method)
    rewritten = cell_attention_for_cuda(model)
    inputs = {i.name for i in rewritten.graph.input}
    produced = {o for n in rewritten.graph.node for o in n.output}
    ops = [n for n in rewritten.graph.node if n.op_type.startswith("Cell")]
    assert ops
    for op in ops:
        assert set(op.input[3:8]) <= inputs and not set(op.input[3:8]) & produced


def test_attention_over_a_computed_mask_is_decomposed(dflash_artifact):
    """A mask some node of the step writes (here an Identity of the input) cannot be read before
    the op's wait: that attention takes the standard ops; the others stay CellAttention."""
    model = load_graph(dflash_artifact, "target")
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    computed = f"{attention.input[3]}/computed"
    model.graph.node.insert(0, onnx.helper.make_node("Identity", [attention.input[3]], [computed],
                                                     name="computed_mask"))
    attention.input[3] = computed
    rewritten = cell_attention_for_cuda(model)
    names = [n.name for n in rewritten.graph.node]
    assert f"{attention.name}/scores/MatMul" in names
    assert sum(n.op_type.startswith("Cell") for n in rewritten.graph.node) == \
        sum(n.op_type == "Attention" for n in model.graph.node) - 1


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


def test_a_change_to_an_included_header_is_a_new_build(plugin_env, monkeypatch):
    """cell_attention.cu includes cell_attention_mma.cuh: the build's name digests both."""
    source = plugin_env / "cell_attention.cu"
    source.write_text('#include "cell_attention_mma.cuh"\n')
    header = plugin_env / "cell_attention_mma.cuh"
    header.write_text("// one kernel\n")
    monkeypatch.setattr(build, "SOURCE", source)
    first = build_library()
    assert build_library() == first
    header.write_text("// another kernel\n")
    assert build_library() != first


def test_a_build_counts_its_seconds_on_stderr_once(plugin_env, monkeypatch, capsys):
    """A build (a minute or so with the real nvcc) shows one line that counts the seconds; a
    library in the cache shows nothing, and so does a build asked for without progress."""
    from cellspec.export import progress

    monkeypatch.setattr(progress, "DELAY_SECONDS", 0.05)
    nvcc = plugin_env / "bin" / "nvcc"
    sleep = shutil.which("sleep", path=os.defpath)  # PATH holds only the fake nvcc's folder
    nvcc.write_text(f"#!/bin/sh\n{sleep} 0.4\n" + nvcc.read_text().split("\n", 1)[1])
    build_library()
    assert "building cellspec's CUDA kernels (cell_attention.cu, once per source): 00:00" in (
        capsys.readouterr().err)
    build_library()
    build_library(force=True, progress=False)
    assert capsys.readouterr().err == ""
    assert len((plugin_env / "bin" / "calls").read_text().splitlines()) == 2


@pytest.mark.parametrize("reported,wgmma,flags", [
    ("9.0\n", "1", ["-gencode", "arch=compute_90a,code=sm_90a", "-DCELLSPEC_WGMMA=1"]),
    ("9.0\n", None, ["-arch=native"]), ("8.9\n", "1", ["-arch=native"]),
    (None, "1", ["-arch=native"])])
def test_wgmma_is_built_only_when_asked_on_a_hopper_gpu(plugin_env, monkeypatch, reported, wgmma,
                                                        flags):
    """CELLSPEC_CUDA_WGMMA=1 on a GPU nvidia-smi reports as compute capability 9.0 (H100, H200)
    builds sm_90a's code, which has the warpgroup MMA, and tells the source so (CELLSPEC_WGMMA);
    otherwise (unasked, another GPU, no nvidia-smi) nvcc's -arch=native. Each target is its own
    library in the cache."""
    if reported is not None:
        smi = plugin_env / "bin" / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\nprintf '{reported}'\n")
        smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    if wgmma is None:
        monkeypatch.delenv("CELLSPEC_CUDA_WGMMA", raising=False)
    else:
        monkeypatch.setenv("CELLSPEC_CUDA_WGMMA", wgmma)
    built = build_library()
    call = (plugin_env / "bin" / "calls").read_text().split()
    targets = ("-arch", "-gencode", "arch=", "-D")
    assert [f for f in call if f in flags or f.startswith(targets)] == flags
    assert built.name.startswith(f"libcellspec_cuda-{build.source_digest()}-")
    assert built.name.endswith("-wgmma.so") == ("-DCELLSPEC_WGMMA=1" in flags)
    assert build_library() == built  # cached
    # the other setting: its own build (on a Hopper GPU), each then found in the cache
    monkeypatch.setenv("CELLSPEC_CUDA_WGMMA", "0" if wgmma == "1" else "1")
    other = build_library()
    assert (other != built) == (reported == "9.0\n")
    monkeypatch.setenv("CELLSPEC_CUDA_WGMMA", wgmma or "0")
    assert build_library() == built
    builds = 1 + (reported == "9.0\n")
    assert len((plugin_env / "bin" / "calls").read_text().splitlines()) == builds


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
        load_session(graph_path(dflash_artifact, "target"), ["CPUExecutionProvider"], "cell")


def test_sampler_sorts_and_sums_become_cellspec_ops(tmp_path):
    """The sample and verify graphs' full TopK becomes one SortDescendingFloat and their CumSum,
    read only by the top-p rule, one SequentialCumSumUntilFloat of the same input and the row's
    top_p, writing the same outputs (the sort a scratch output more); nothing else changes, and
    with the ops expanded back to their definitions (every sum past the first rank whose
    exclusive sum reaches top_p +inf) the graphs draw what the exported ones do."""
    import onnxruntime as ort

    from cellspec.export.sampler import CANDIDATES, GRAPH_FILES, PARAMS, write_sampler_graphs
    from cellspec.rewrite import SEQUENTIAL_CUMSUM_UNTIL, SORT_DESCENDING, sampling_for_cuda

    vocab = 64
    write_sampler_graphs(tmp_path, vocab)
    model = onnx.load(str(tmp_path / GRAPH_FILES["sample"]))
    rewritten = sampling_for_cuda(model)
    ops = {"CumSum": SEQUENTIAL_CUMSUM_UNTIL, "TopK": SORT_DESCENDING}
    before = [n for n in model.graph.node if n.op_type in ops]
    after = [n for n in rewritten.graph.node if n.domain == CELLSPEC_DOMAIN]
    assert sorted(n.op_type for n in before) == ["CumSum", "TopK"]
    assert [(n.op_type, list(n.input), list(n.output), len(n.attribute)) for n in after] == [
        (ops[n.op_type], [n.input[0]] + ["/params/top_p_output_0"] * (n.op_type == "CumSum"),
         list(n.output) + [f"{n.name}/scratch"] * (n.op_type == "TopK"), 0) for n in before]
    untouched = [n for n in rewritten.graph.node if n.domain != CELLSPEC_DOMAIN]
    assert untouched == [n for n in model.graph.node if n.op_type not in ops]
    verify_model = onnx.load(str(tmp_path / GRAPH_FILES["verify"]))
    verify = sampling_for_cuda(verify_model)
    assert sorted(n.op_type for n in verify.graph.node if n.domain == CELLSPEC_DOMAIN) == [
        SEQUENTIAL_CUMSUM_UNTIL, SORT_DESCENDING]

    expanded = expand(rewritten)
    assert not any(n.domain == CELLSPEC_DOMAIN for n in expanded.graph.node)
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((12, vocab)) * 3).astype(np.float32)
    logits[:, ::5] = logits[:, :1]  # ties, ordered by id
    uniforms = (0.1, 0.3, 0.5, 0.7, 0.9, 0.99) * 2
    feeds = {"logits": logits,
             PARAMS: np.array([[0.7, 1.0, 0, u] for u in uniforms], np.float32)}
    feeds[PARAMS][3:, 1] = [0.8, 0.5, 0.2, 0.05, 0.0, 0.95, 0.9, 0.6, 0.3]  # top_p
    feeds[PARAMS][8:, 2] = [3, 1, 40, 64]  # top_k
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = ort.InferenceSession(expanded.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)
    # the verify graph too: 4 owners of 3 rows, each owner's top_p and top_k
    owners = logits.reshape(4, 3, vocab)
    params = np.concatenate([feeds[PARAMS][::3, :3], feeds[PARAMS][:, 3].reshape(4, 3)], 1)
    candidates = rng.integers(0, vocab, (4, 3))
    feeds = {"logits": owners, CANDIDATES: candidates, PARAMS: params}
    want = ort.InferenceSession(verify_model.SerializeToString()).run(None, feeds)[0]
    got = ort.InferenceSession(expand(verify).SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["exclusive", "reverse", "first_axis", "int64", "top_k",
                                  "smallest", "unsorted"])
def test_other_sums_and_sorts_stay(kind):
    """Only float32 sums along the last axis, inclusive and forward, and float32 sorts of a
    whole last axis, largest first, are the ops'."""
    from onnx import TensorProto, helper

    from cellspec.rewrite import sampling_for_cuda

    dtype = TensorProto.INT64 if kind == "int64" else TensorProto.FLOAT
    axis = 0 if kind == "first_axis" else 1
    values = [onnx.numpy_helper.from_array(np.array(axis), "axis"),
              onnx.numpy_helper.from_array(np.array([3 if kind == "top_k" else 5]), "k")]
    attrs = {"exclusive": {"exclusive": 1}, "reverse": {"reverse": 1},
             "smallest": {"largest": 0}, "unsorted": {"sorted": 0}}.get(kind, {})
    sums = {k: v for k, v in attrs.items() if k in ("exclusive", "reverse")}
    sorts = {k: v for k, v in attrs.items() if k in ("largest", "sorted")}
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["y"], name="sum", **sums),
             helper.make_node("TopK", ["x", "k"], ["v", "i"], name="sort", axis=axis, **sorts)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", dtype, [2, 5])],
        [helper.make_tensor_value_info(n, t, None)
         for n, t in (("y", dtype), ("v", dtype), ("i", TensorProto.INT64))],
        initializer=values)
    model = helper.make_model(graph)
    rewritten = sampling_for_cuda(model)
    if kind in ("exclusive", "reverse"):
        assert [n.op_type for n in rewritten.graph.node] == ["CumSum", "SortDescendingFloat"]
    elif kind in ("top_k", "smallest", "unsorted"):
        assert [n.op_type for n in rewritten.graph.node] == ["SequentialCumSumFloat", "TopK"]
    else:
        assert rewritten == model


@pytest.fixture(scope="module")
def dflash_half(tmp_path_factory):
    """conftest's dflash_artifact exported in float16 (its head's logits cast to float32)."""
    from tests.conftest import export_dflash

    return export_dflash(tmp_path_factory.mktemp("dflash-half"), dtype="float16",
                         static_widths=(1,), dynamic_width=0, max_context=128, max_cells=512)


@pytest.mark.parametrize("which", ["dflash_artifact", "dflash_half"])
@pytest.mark.parametrize("projections", ["cublas", "row"])
def test_a_draft_blocks_tree_choices_become_one_top_log_softmax(request, which, projections):
    """draft_block's LogSoftmax + TopK (its top_ids / top_logp) become one TopLogSoftmaxFloat of
    the logits with the TopK's k and outputs, when ort-cuda loads it with CellAttention, in
    float32 and float16 artifacts (whose logits ONNX's shape inference cannot type: it stops at
    the contrib norms)."""
    from cellspec.rewrite import TOP_LOG_SOFTMAX
    from cellspec.runtime.device_sessions import rewritten

    model = load_graph(request.getfixturevalue(which), "draft_block")
    soft = next(n for n in model.graph.node if n.op_type == "LogSoftmax")
    top = next(n for n in model.graph.node if n.op_type == "TopK")
    k = onnx.numpy_helper.to_array(next(i for i in model.graph.initializer
                                        if i.name == top.input[1])).tolist()
    after = rewritten(model, "cell", projections)
    fused = [n for n in after.graph.node if n.op_type == TOP_LOG_SOFTMAX]
    assert [(list(n.input), list(n.output), attrs(n), n.domain) for n in fused] == [
        ([soft.input[0]], list(top.output), {"k": k[0]}, CELLSPEC_DOMAIN)]
    assert not [n for n in after.graph.node if n.op_type in ("LogSoftmax", "TopK")]
    assert [o.name for o in after.graph.output] == [o.name for o in model.graph.output]


def tree_choices_graph(kind: str = "fused"):
    """logits [R, V] -> LogSoftmax -> TopK, as draft_block's tail, or a form that must stay."""
    from onnx import TensorProto, helper

    dtype = TensorProto.FLOAT16 if kind == "float16" else TensorProto.FLOAT
    rank3 = kind == "fused_rank3"
    shape = [2, 3, 40] if rank3 else [6, 40]
    soft_axis = {"first_axis": 0, "fused_rank3": -1}.get(kind, 1)
    top_attrs = {"smallest": {"largest": 0}, "unsorted": {"sorted": 0},
                 "top_axis": {"axis": 0}}.get(kind, {"axis": -1 if rank3 else 1})
    k = {"k_too_large": 9}.get(kind, 4)
    nodes = [helper.make_node("LogSoftmax", ["logits"], ["logp"], name="soft", axis=soft_axis),
             helper.make_node("TopK", ["logp", "k"], ["top_logp", "top_ids"], name="top",
                              **top_attrs)]
    outputs = [("top_logp", dtype), ("top_ids", TensorProto.INT64)]
    if kind == "logp_read_elsewhere":
        nodes.append(helper.make_node("ReduceMax", ["logp"], ["peak"], name="peak"))
        outputs.append(("peak", dtype))
    if kind == "logp_an_output":
        outputs.append(("logp", dtype))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("logits", dtype, shape)],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=[onnx.numpy_helper.from_array(np.array([k]), "k")])
    return helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])


@pytest.mark.parametrize("kind", ["fused", "fused_rank3"])
def test_tree_choices_expanded_back_choose_what_the_exported_graph_does(kind):
    """The fused op, expanded to its definition (LogSoftmax, then TopK along the last axis, k
    from its attribute), gives the exported graph's values and ids: the rewrite keeps the
    input, the outputs' order and k."""
    import onnxruntime as ort

    from cellspec.rewrite import top_choices_for_cuda

    model = tree_choices_graph(kind)
    rewritten = top_choices_for_cuda(model)
    assert [n.op_type for n in rewritten.graph.node] == ["TopLogSoftmaxFloat"]
    rng = np.random.default_rng(4)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    logits = (rng.standard_normal(shape) * 3).astype(np.float32)
    logits[..., ::4] = logits[..., :1]  # ties, by lower id
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"logits": logits})
    got = ort.InferenceSession(expand(rewritten).SerializeToString()).run(
        None, {"logits": logits})
    for a, b in zip(want, got):
        np.testing.assert_array_equal(b, a)
    assert want[1].shape == (*shape[:-1], 4)


@pytest.mark.parametrize("kind", ["float16", "first_axis", "top_axis", "smallest", "unsorted",
                                  "k_too_large", "logp_read_elsewhere", "logp_an_output"])
def test_other_log_softmaxes_and_top_ks_stay(kind):
    """Only a largest-first, sorted TopK of at most 8 along the last axis of a float32
    LogSoftmax along the last axis, which nothing else reads, is the op's."""
    from cellspec.rewrite import top_choices_for_cuda

    model = tree_choices_graph(kind)
    assert top_choices_for_cuda(model) == model


@pytest.fixture(scope="module")
def llama_half(tmp_path_factory):
    """The tiny random Llama exported in float16."""
    from cellspec.export import ExportConfig, export
    from tests.conftest import make_tiny_model

    root = tmp_path_factory.mktemp("llama-half")
    make_tiny_model("llama_gqa").save_pretrained(root / "hf")
    export(root / "hf", root / "artifact", ExportConfig(dtype="float16", static_widths=(1,),
                                                       dynamic_width=0, max_context=128,
                                                       max_cells=512), progress=False)
    return root / "artifact"


def test_cell_attention_brings_row_projections_unless_told_otherwise(monkeypatch):
    from cellspec.runtime.ort_device import cuda_projections

    monkeypatch.delenv("CELLSPEC_CUDA_PROJECTIONS", raising=False)
    assert (cuda_projections("cell"), cuda_projections("decomposed")) == ("row", "cublas")
    monkeypatch.setenv("CELLSPEC_CUDA_PROJECTIONS", "cublas")
    assert cuda_projections("cell") == "cublas"


def test_a_drafts_projections_are_the_targets_unless_told_otherwise(monkeypatch):
    from cellspec.runtime.ort_device import OrtDeviceBackend, cuda_draft_projections

    for name in ("CELLSPEC_CUDA_PROJECTIONS", "CELLSPEC_CUDA_DRAFT_PROJECTIONS"):
        monkeypatch.delenv(name, raising=False)
    assert (cuda_draft_projections("cell"), cuda_draft_projections("decomposed")) == \
        ("row", "cublas")
    monkeypatch.setenv("CELLSPEC_CUDA_PROJECTIONS", "cublas")
    assert cuda_draft_projections("cell") == "cublas"
    monkeypatch.setenv("CELLSPEC_CUDA_PROJECTIONS", "row")
    monkeypatch.setenv("CELLSPEC_CUDA_DRAFT_PROJECTIONS", "cublas")
    assert cuda_draft_projections("cell") == "cublas"
    # refused, named, before the backend touches a device (None here)
    for attention, draft, message in (("cell", "rows", "projections 'rows'"),
                                      ("decomposed", "row", "needs attention 'cell'")):
        with pytest.raises(InvalidArgument, match=message):
            OrtDeviceBackend("ort-cuda", None, [], {}, None, attention=attention,
                             projections="cublas", draft_projections=draft)


def test_row_projections_come_only_with_cell_attention_and_when_asked(llama_half):
    """`ort-cuda` rewrites a float16 graph's projections into RowMatMul (and the SwiGlus of
    gate/up products into RowMatMulSwiGlu) only with CELLSPEC_CUDA_PROJECTIONS=row, which needs
    CellAttention's library; by default they stay ONNX Runtime's MatMuls."""
    from cellspec.runtime.device_sessions import rewritten

    model = load_graph(llama_half, "target")
    layers = sum(n.op_type == "Attention" for n in model.graph.node)
    row = [n.op_type for n in rewritten(model, "cell", "row").graph.node]
    assert (row.count("RowMatMulFloat16"), row.count("RowMatMulSwiGluFloat16"),
            row.count("RowMatMulRotaryFloat16"), row.count("CellAttentionFloat16")) == \
        (2 * layers + 1, layers, layers, layers)  # o and down per layer, and the LM head
    assert "MatMul" not in row and "Gemm" not in row
    default = [n.op_type for n in rewritten(model, "cell").graph.node]
    assert not any(op.startswith("RowMatMul") for op in default)
    assert default.count("MatMul") == 4 * layers and default.count("SwiGluFloat16") == layers
    with pytest.raises(CellspecError, match="needs attention 'cell'"):
        rewritten(model, "decomposed", "row")
    with pytest.raises(CellspecError, match="projections 'rows'"):
        rewritten(model, "cell", "rows")
    with pytest.raises(CellspecError, match="projections 'rows'"):
        load_session(llama_half / "missing.onnx", ["CPUExecutionProvider"], "cell", "rows")


def test_ort_cuda_runs_cell_attention_by_default_where_its_library_builds(plugin_env,
                                                                          monkeypatch, capsys):
    """CELLSPEC_CUDA_ATTENTION unset: "cell" where the library is built or builds now, else
    "decomposed" with one stderr line naming what is missing (once a process); set, as set;
    without PyCUDA "decomposed" and nothing said (loading ort-cuda names what to install)."""
    from cellspec.runtime import ort_device

    monkeypatch.delenv("CELLSPEC_CUDA_ATTENTION", raising=False)
    monkeypatch.setattr(ort_device, "_has_pycuda", lambda: True)
    ort_device.default_attention.cache_clear()
    try:
        assert ort_device.cuda_attention() == "cell"
        assert len(list((plugin_env / "cache" / "plugins").glob("*.so"))) == 1
        assert ort_device.cuda_projections(ort_device.cuda_attention()) == "row"
        ort_device.default_attention.cache_clear()
        for library in (plugin_env / "cache" / "plugins").glob("*.so"):
            library.unlink()
        monkeypatch.setenv("PATH", str(plugin_env / "nowhere"))
        monkeypatch.setenv("CUDA_HOME", str(plugin_env / "nowhere"))
        capsys.readouterr()
        assert ort_device.cuda_attention() == "decomposed"
        said = capsys.readouterr().err
        assert said.count("\n") == 1 and "standard ops" in said and "nvcc" in said
        assert ort_device.cuda_attention() == "decomposed"
        assert capsys.readouterr().err == ""  # once a process
        # a compiler that fails: its first line said, the whole error one command away
        monkeypatch.setenv("PATH", str(plugin_env / "bin"))
        (plugin_env / "bin" / "nvcc").write_text('#!/bin/sh\necho "error: no such type" >&2\n'
                                                 'exit 2\n')
        ort_device.default_attention.cache_clear()
        assert ort_device.cuda_attention() == "decomposed"
        said = capsys.readouterr().err
        assert "nvcc failed to build cell_attention.cu" in said and said.count("\n") == 1
        assert "python -m cellspec.plugins.build" in said
        monkeypatch.setenv("CELLSPEC_CUDA_ATTENTION", "cell")
        assert ort_device.cuda_attention() == "cell"  # as asked: its load then says why not
        monkeypatch.delenv("CELLSPEC_CUDA_ATTENTION")
        ort_device.default_attention.cache_clear()
        monkeypatch.setattr(ort_device, "_has_pycuda", lambda: False)
        monkeypatch.setenv("PATH", str(plugin_env / "bin"))
        assert ort_device.cuda_attention() == "decomposed"
        assert capsys.readouterr().err == ""
        assert not list((plugin_env / "cache" / "plugins").glob("*.so"))  # nothing built
    finally:
        ort_device.default_attention.cache_clear()


def test_headers_of_a_newer_api_than_the_runtime_serves_are_refused(plugin_env):
    """A library built against a newer C API asks onnxruntime for an API it lacks: refused at
    the build, naming both versions; headers of its own version or older build."""
    import onnxruntime

    served = int(onnxruntime.__version__.split(".")[1])
    header = plugin_env / "include" / "onnxruntime_c_api.h"
    header.write_text(f"#pragma once\n#define ORT_API_VERSION {served + 1}\n")
    with pytest.raises(PluginUnavailable, match=f"C API version {served + 1}, newer than the "
                                                f"installed onnxruntime .*serves \\({served}\\)"):
        build_library()
    assert not (plugin_env / "bin" / "calls").exists()  # nvcc never ran
    header.write_text(f"#pragma once\n#define ORT_API_VERSION {served}\n")
    assert build_library().read_text() == "built\n"
