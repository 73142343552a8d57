"""cellspec's CUDA CellAttention op (cellspec/plugins/cell_attention.cu) alone: against a numpy
reference, and bit for bit the same token output whatever the batch, the cell bucket, and
whether a key is new or already a cell."""

import numpy as np
import pytest
from onnx import TensorProto, helper

pytestmark = pytest.mark.gpu

H, KV, D, CELLS = 6, 2, 64, 512
TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def run_op(library, feeds: dict, by_position: int) -> np.ndarray:
    import onnxruntime as ort

    from cellspec.rewrite import CELL_OPS

    dtype = feeds["q"].dtype.type
    elem = TYPES[dtype]
    names = ["q", "k_new", "v_new", "k_pool", "v_pool", "cell_table", "attn_mask", "positions"]
    kinds = {"cell_table": TensorProto.INT64, "attn_mask": TensorProto.BOOL,
             "positions": TensorProto.INT64}
    inputs = [helper.make_tensor_value_info(n, kinds.get(n, elem), feeds[n].shape) for n in names]
    node = helper.make_node(CELL_OPS[elem], names, ["out", "partials"], domain="cellspec",
                            num_heads=H, kv_num_heads=KV, scale=D ** -0.5,
                            by_position=by_position)
    graph = helper.make_graph([node], "t", inputs,
                              [helper.make_tensor_value_info("out", elem, None)])
    model = helper.make_model(graph, ir_version=10,  # what ONNX Runtime 1.31 reads
                              opset_imports=[helper.make_opsetid("", 23),
                                             helper.make_opsetid("cellspec", 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CUDAExecutionProvider"])
    return session.run(["out"], feeds)[0]


def reference(feeds: dict) -> np.ndarray:
    """[pool[cell_table] ; new] per row, masked softmax in float64, query head h on kv h // G."""
    q = feeds["q"].astype(np.float64)
    S, Q, _ = q.shape
    keys = np.concatenate([feeds["k_pool"][feeds["cell_table"]], feeds["k_new"]], axis=1)
    values = np.concatenate([feeds["v_pool"][feeds["cell_table"]], feeds["v_new"]], axis=1)
    out = np.zeros((S, Q, H, D))
    for h in range(H):
        kv = slice((h // (H // KV)) * D, (h // (H // KV) + 1) * D)
        scores = q[:, :, h * D:(h + 1) * D] @ keys[:, :, kv].astype(np.float64).transpose(0, 2, 1)
        scores = np.where(feeds["attn_mask"][:, 0], scores * D ** -0.5, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out[:, :, h] = probs @ values[:, :, kv].astype(np.float64)
    return out.reshape(S, Q, H * D)


def causal_step(rng, lengths: list[int], width: int, num_cells: int, dtype, pools=None,
                new=None) -> dict:
    """Rows of `width` new tokens after `lengths` cells each (cells numbered row by row from 1),
    reading `num_cells` cells (the scratch cell 0 past each length), causal."""
    S = len(lengths)
    k_pool, v_pool = pools or (rng.standard_normal((CELLS, KV * D)).astype(dtype) for _ in "kv")
    table = np.zeros((S, num_cells), np.int64)
    mask = np.zeros((S, 1, width, num_cells + width), bool)
    start = 1
    for s, length in enumerate(lengths):
        table[s, :length] = np.arange(start, start + length)
        start += length
        mask[s, 0, :, :length] = True
        mask[s, 0, :, num_cells:] = np.tril(np.ones((width, width), bool))
    k_new, v_new = new or (rng.standard_normal((S, width, KV * D)).astype(dtype) for _ in "kv")
    return {"q": rng.standard_normal((S, width, H * D)).astype(dtype), "k_new": k_new,
            "v_new": v_new, "k_pool": k_pool, "v_pool": v_pool, "cell_table": table,
            "attn_mask": mask,
            "positions": (np.array(lengths)[:, None] + np.arange(width)).astype(np.int64)}


@pytest.mark.parametrize("dtype,tolerance", [(np.float32, 2e-5), (np.float16, 4e-3)])
@pytest.mark.parametrize("by_position", [1, 0])
def test_matches_reference(cell_library, dtype, tolerance, by_position):
    rng = np.random.default_rng(0)
    feeds = causal_step(rng, [0, 5, 200, 130], 3, 256, dtype)  # 2 chunks of keys and 1
    out = run_op(cell_library, feeds, by_position)
    np.testing.assert_allclose(out.astype(np.float64), reference(feeds), atol=tolerance,
                               rtol=tolerance)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_row_is_the_same_alone_in_a_batch_and_in_a_larger_bucket(cell_library, dtype):
    rng = np.random.default_rng(1)
    batch = causal_step(rng, [300, 7, 129], 1, 320, dtype)
    row = {n: batch[n][:1] if n not in ("k_pool", "v_pool") else batch[n] for n in batch}
    padded = dict(row, cell_table=np.pad(row["cell_table"], ((0, 0), (0, 700))))
    mask = row["attn_mask"]
    padded["attn_mask"] = np.concatenate([mask[..., :320], np.zeros((1, 1, 1, 700), bool),
                                          mask[..., 320:]], axis=-1)
    alone = run_op(cell_library, row, 1)
    assert np.array_equal(run_op(cell_library, batch, 1)[:1], alone)
    assert np.array_equal(run_op(cell_library, padded, 1), alone)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_verified_key_reads_the_same_as_a_cell(cell_library, dtype):
    """Row 0 verifies 4 new tokens after 250 cells; then the same tokens one step at a time,
    the earlier ones committed to cells: each token's output is the same bit for bit."""
    rng = np.random.default_rng(2)
    verify = causal_step(rng, [250], 4, 256, dtype)
    pools = verify["k_pool"].copy(), verify["v_pool"].copy()
    got = run_op(cell_library, verify, 1)
    for i in range(4):
        for pool, new in zip(pools, (verify["k_new"], verify["v_new"])):
            if i:  # token i - 1 (position 249 + i) committed to its cell, 250 + i
                pool[250 + i] = new[0, i - 1]
        step = causal_step(rng, [250 + i], 1, 256, dtype, pools,
                           (verify["k_new"][:, i:i + 1], verify["v_new"][:, i:i + 1]))
        step["q"] = verify["q"][:, i:i + 1]
        assert np.array_equal(run_op(cell_library, step, 1)[0, 0], got[0, i]), i
