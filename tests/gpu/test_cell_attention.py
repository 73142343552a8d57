"""cellspec's CUDA ops (cellspec/plugins/cell_attention.cu) alone: CellAttention against a numpy
reference, and bit for bit the same token output whatever the batch, the cell bucket, and
whether a key is new or already a cell; RowMatMul against numpy, RowMatMulSwiGlu against
SwiGlu(RowMatMul), RowMatMulRotary against RowMatMul rotated; the sampler's sort and sums; the
draft block's top choices (TopLogSoftmax)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

pytestmark = pytest.mark.gpu

H, KV, D, CELLS = 6, 2, 64, 512
TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}


def run_op(library, feeds: dict, by_position: int, head_dim: int = D, heads: int = H,
           kv_heads: int = KV) -> np.ndarray:
    """CellAttention on `feeds` (its eight inputs by name): its output."""
    names = ["q", "k_new", "v_new", "k_pool", "v_pool", "cell_table", "attn_mask", "positions"]
    return run_node(library, "CellAttention", {n: feeds[n] for n in names}, ["out", "partials"],
                    num_heads=heads, kv_num_heads=kv_heads, scale=head_dim ** -0.5,
                    by_position=by_position)[0]


def reference(feeds: dict, head_dim: int = D, heads: int = H, kv_heads: int = KV) -> np.ndarray:
    """[pool[cell_table] ; new] per row, masked softmax in float64, query head h on kv h // G."""
    D, H, KV = head_dim, heads, kv_heads
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
                new=None, head_dim: int = D, heads: int = H, kv_heads: int = KV) -> dict:
    """Rows of `width` new tokens after `lengths` cells each (cells numbered row by row from 1),
    reading `num_cells` cells (the scratch cell 0 past each length), causal."""
    D, H, KV = head_dim, heads, kv_heads
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


# head sizes whose 16-byte vectors split over the kernel's 4 warps evenly (64, 128), unevenly
# (80: 10 half vectors, 3 a warp) and one a warp (32 in half precision)
HEAD_DIMS = [64, 32, 80, 128]


@pytest.mark.parametrize("dtype,tolerance", [(np.float32, 2e-5), (np.float16, 4e-3)])
@pytest.mark.parametrize("by_position", [1, 0])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_matches_reference(cell_library, dtype, tolerance, by_position, head_dim):
    rng = np.random.default_rng(0)
    feeds = causal_step(rng, [0, 5, 200, 130], 3, 256, dtype,  # 2 chunks of keys and 1
                        head_dim=head_dim)
    out = run_op(cell_library, feeds, by_position, head_dim)
    np.testing.assert_allclose(out.astype(np.float64), reference(feeds, head_dim),
                               atol=tolerance, rtol=tolerance)


# steps CellAttention tiles one (row, head) pair a block: 2, 3 and 4 chunks of keys (pair_kernel,
# one launch), and 5 (chunk_kernel and combine_kernel): (lengths, width, cells)
PAIR_STEPS = [([100], 1, 256), ([0, 5, 200, 130], 3, 256), ([150], 16, 256), ([300], 1, 384),
              ([40, 90], 1, 128), ([500], 1, 512)]


def run_pair_steps(library, folder, dtype, head_dim: int, by_position: int) -> list:
    """CellAttention on PAIR_STEPS' feeds (made from seed 3), saved in `folder`."""
    rng = np.random.default_rng(3)
    outs = []
    for lengths, width, cells in PAIR_STEPS:
        feeds = causal_step(rng, lengths, width, cells, dtype, head_dim=head_dim)
        outs.append(run_op(library, feeds, by_position, head_dim))
    np.savez(folder / "outs.npz", *outs)
    return outs


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("by_position", [1, 0])
def test_a_pair_a_block_in_one_launch_is_the_two_kernels_bit_for_bit(cell_library, tmp_path,
                                                                   dtype, head_dim,
                                                                   by_position):
    """pair_kernel (each chunk's partials in shared memory, combined in the block) against
    chunk_kernel + combine_kernel (CELLSPEC_CUDA_PAIR_KERNEL=0, read once per process: run in
    a child process), on the same feeds: every output byte. Half-precision heads of 128, which
    run the tensor-core chunk by default, run both sides in children with it off
    (CELLSPEC_CUDA_MMA_ATTENTION=0)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]

    def child(folder: Path, **env: str) -> list:
        folder.mkdir()
        code = ("import sys, numpy as np; from pathlib import Path; "
                "from tests.gpu.test_cell_attention import run_pair_steps; "
                f"run_pair_steps({str(cell_library)!r}, Path({str(folder)!r}), "
                f"np.{np.dtype(dtype).name}, {head_dim}, {by_position})")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=root,
                       env={**os.environ, **env})
        saved = np.load(folder / "outs.npz")
        return [saved[f"arr_{i}"] for i in range(len(PAIR_STEPS))]

    if dtype == np.float16 and head_dim >= 128:
        outs = child(tmp_path / "together", CELLSPEC_CUDA_MMA_ATTENTION="0")
        apart = child(tmp_path / "apart", CELLSPEC_CUDA_MMA_ATTENTION="0",
                      CELLSPEC_CUDA_PAIR_KERNEL="0")
    else:
        outs = run_pair_steps(cell_library, tmp_path, dtype, head_dim, by_position)
        apart = child(tmp_path / "apart", CELLSPEC_CUDA_PAIR_KERNEL="0")
    for i, out in enumerate(outs):
        assert np.array_equal(out.view(np.uint8), apart[i].view(np.uint8)), PAIR_STEPS[i]
        np.testing.assert_allclose(out.astype(np.float64),
                                   reference_of(i, dtype, head_dim), atol=4e-3, rtol=4e-3)


def reference_of(index: int, dtype, head_dim: int) -> np.ndarray:
    """The numpy reference of PAIR_STEPS[index]'s feeds (made as run_pair_steps makes them)."""
    rng = np.random.default_rng(3)
    for i, (lengths, width, cells) in enumerate(PAIR_STEPS):
        feeds = causal_step(rng, lengths, width, cells, dtype, head_dim=head_dim)
        if i == index:
            return reference(feeds, head_dim)
    raise IndexError(index)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_a_row_is_the_same_alone_in_a_batch_and_in_a_larger_bucket(cell_library, dtype,
                                                                   head_dim):
    rng = np.random.default_rng(1)
    batch = causal_step(rng, [300, 7, 129], 1, 320, dtype, head_dim=head_dim)
    row = {n: batch[n][:1] if n not in ("k_pool", "v_pool") else batch[n] for n in batch}
    padded = dict(row, cell_table=np.pad(row["cell_table"], ((0, 0), (0, 700))))
    mask = row["attn_mask"]
    padded["attn_mask"] = np.concatenate([mask[..., :320], np.zeros((1, 1, 1, 700), bool),
                                          mask[..., 320:]], axis=-1)
    alone = run_op(cell_library, row, 1, head_dim)
    assert np.array_equal(run_op(cell_library, batch, 1, head_dim)[:1], alone)
    assert np.array_equal(run_op(cell_library, padded, 1, head_dim), alone)


@pytest.mark.parametrize("dtype,tolerance", [(np.float32, 2e-5), (np.float16, 4e-3)])
def test_blocks_of_four_heads_and_of_one_give_the_same_rows(cell_library, dtype, tolerance):
    """Qwen3-8B's heads (32 on 8 kv heads): 8 decode rows would take 768 blocks of one head,
    more than the launch gives one head each (5 a multiprocessor: 660 on the H200), so they
    run 4 heads a block and sum the 4 heads at once; a row alone takes one head a block.
    Both equal the reference, and each other bit for bit; a 3-token step of 4 rows (2 rows
    and 4 heads a block) equals the reference too."""
    rng = np.random.default_rng(3)
    shape = {"head_dim": 128, "heads": 32, "kv_heads": 8}
    batch = causal_step(rng, [300, 7, 129, 50, 0, 10, 11, 1], 1, 320, dtype, **shape)
    together = run_op(cell_library, batch, 1, **shape)
    np.testing.assert_allclose(together.astype(np.float64), reference(batch, **shape),
                               atol=tolerance, rtol=tolerance)
    for s in range(8):
        row = {n: batch[n][s:s + 1] if n not in ("k_pool", "v_pool") else batch[n]
               for n in batch}
        assert np.array_equal(run_op(cell_library, row, 1, **shape)[0], together[s]), s
    wide = causal_step(rng, [0, 5, 200, 130], 3, 256, dtype, **shape)
    np.testing.assert_allclose(run_op(cell_library, wide, 1, **shape).astype(np.float64),
                               reference(wide, **shape), atol=tolerance, rtol=tolerance)


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


def run_node(library, op: str, feeds: dict, outputs: list[str], **attrs) -> list[np.ndarray]:
    """One cellspec op of type `op` + the feeds' dtype suffix on the CUDA provider."""
    elem = TYPES[next(v for v in feeds.values() if v.dtype.kind == "f").dtype.type]
    suffix = {TensorProto.FLOAT: "Float", TensorProto.FLOAT16: "Float16"}[elem]
    kinds = {"cell_table": TensorProto.INT64, "attn_mask": TensorProto.BOOL,
             "positions": TensorProto.INT64, "indices": TensorProto.INT64}
    inputs = [helper.make_tensor_value_info(n, kinds.get(n, elem), v.shape)
              for n, v in feeds.items()]
    node = helper.make_node(op + suffix, list(feeds), outputs, domain="cellspec", **attrs)
    graph = helper.make_graph([node], "t", inputs,
                              [helper.make_tensor_value_info(n, kinds.get(n, elem), None)
                               for n in outputs if n not in ("q_rot", "partials", "scratch")])
    return cuda_session(library, graph).run([o.name for o in graph.output], feeds)


def cuda_session(library, graph):
    """A CUDA-provider session on `graph` (opset 23 and cellspec ops) with the op library."""
    import onnxruntime as ort

    model = helper.make_model(graph, ir_version=10,  # what ONNX Runtime 1.31 reads
                              opset_imports=[helper.make_opsetid("", 23),
                                             helper.make_opsetid("cellspec", 1)])
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CUDAExecutionProvider"])


def rotate(x: np.ndarray, positions: np.ndarray, heads: int, dtype, base: float = 10000.0):
    """Rotate-half rotary embedding of x [S, Q, heads * D] in float64, and the caches
    [positions, D / 2] in dtype it used."""
    S, Q, _ = x.shape
    x = x.astype(np.float64).reshape(S, Q, heads, D)
    angles = np.arange(1024)[:, None] * base ** (-np.arange(0, D, 2) / D)
    cos, sin = np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    c = cos[positions][:, :, None].astype(np.float64)
    s = sin[positions][:, :, None].astype(np.float64)
    x1, x2 = x[..., :D // 2], x[..., D // 2:]
    out = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    return out.reshape(S, Q, heads * D), cos, sin


def head_norm(x: np.ndarray, weight: np.ndarray, heads: int, eps: float, dtype) -> np.ndarray:
    """RMS over each head's D values, times weight, rounded to dtype (as the graph's norm)."""
    S, Q, _ = x.shape
    h = x.astype(np.float64).reshape(S, Q, heads, D)
    h = h / np.sqrt((h * h).mean(-1, keepdims=True) + eps) * weight.astype(np.float64)
    return h.astype(dtype).reshape(S, Q, heads * D)


@pytest.mark.parametrize("dtype,tolerance", [(np.float32, 2e-5), (np.float16, 4e-3)])
@pytest.mark.parametrize("norms", [False, True])
def test_rotary_attention_matches_reference(cell_library, dtype, tolerance, norms):
    """CellRotaryAttention on qkv [S, Q, (H + 2 KV) D]: its rotated keys and values and its
    output against rotation + the attention reference, with Qwen3's head norms or without."""
    rng = np.random.default_rng(3)
    step = causal_step(rng, [0, 9, 300, 140], 5, 320, dtype)
    qkv = rng.standard_normal((4, 5, (H + 2 * KV) * D)).astype(dtype)
    q, k, v = np.split(qkv, [H * D, (H + KV) * D], axis=-1)
    weights = [rng.uniform(0.5, 1.5, D).astype(dtype) for _ in "qk"]
    if norms:
        q, k = head_norm(q, weights[0], H, 1e-6, dtype), head_norm(k, weights[1], KV, 1e-6, dtype)
    q_rot, cos, sin = rotate(q, step["positions"], H, dtype)
    k_rot, _, _ = rotate(k, step["positions"], KV, dtype)
    feeds = {"qkv": qkv, "cos_cache": cos, "sin_cache": sin,
             "k_pool": step["k_pool"], "v_pool": step["v_pool"],
             "cell_table": step["cell_table"], "attn_mask": step["attn_mask"],
             "positions": step["positions"]}
    if norms:
        feeds.update(q_norm=weights[0], k_norm=weights[1])
    out, k_new, v_new = run_node(
        cell_library, "CellNormRotaryAttention" if norms else "CellRotaryAttention", feeds,
        ["out", "k_new", "v_new", "q_rot", "partials"], num_heads=H, kv_num_heads=KV,
        scale=D ** -0.5, by_position=1, **({"epsilon": 1e-6} if norms else {}))
    np.testing.assert_allclose(k_new.astype(np.float64), k_rot, atol=tolerance * 2,
                               rtol=tolerance)
    assert np.array_equal(v_new, v)
    expected = reference(dict(step, q=q_rot, k_new=k_new, v_new=v_new))
    np.testing.assert_allclose(out.astype(np.float64), expected, atol=tolerance * 2,
                               rtol=tolerance)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_swiglu_matches_reference(cell_library, dtype):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 5, 2 * 1536)) * 4).astype(dtype)
    (out,) = run_node(cell_library, "SwiGlu", {"x": x}, ["out"])
    gate, up = x[..., :1536].astype(np.float64), x[..., 1536:].astype(np.float64)
    tolerance = 1e-6 if dtype == np.float32 else 1e-3
    np.testing.assert_allclose(out.astype(np.float64), gate / (1 + np.exp(-gate)) * up,
                               rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_wide_verify_is_the_same_alone_and_in_a_batch(cell_library, dtype):
    """Sixteen-token verifies of six sequences in one step (tiles of several rows and heads per
    block) against each sequence alone (fewer, smaller tiles): bit for bit, row by row."""
    rng = np.random.default_rng(5)
    batch = causal_step(rng, [40, 0, 200, 129, 7, 130], 16, 320, dtype)  # 506 of 512 cells
    together = run_op(cell_library, batch, 1)
    for s in range(6):
        row = {n: batch[n][s:s + 1] if n not in ("k_pool", "v_pool") else batch[n]
               for n in batch}
        assert np.array_equal(run_op(cell_library, row, 1)[0], together[s]), s


@pytest.mark.parametrize("shape", [(3, 49152), (2, 4, 5000), (1, 1), (5, 2048)])
def test_sequential_cumsum_is_numpys_bit_for_bit(cell_library, shape):
    """SequentialCumSum sums as numpy's cumsum does, one float32 add at a time: probabilities
    sorted descending (the sampler's), signed values, zeros and a leading -0."""
    rng = np.random.default_rng(sum(shape))
    probs = np.sort(rng.dirichlet(np.full(shape[-1], 0.05), shape[:-1]), axis=-1)[..., ::-1]
    signed = rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 6, shape)
    signed[..., ::7] = 0.0
    signed[..., 0] = -0.0
    for x in (probs.astype(np.float32), signed.astype(np.float32)):
        (got,) = run_node(cell_library, "SequentialCumSum", {"x": x}, ["y"])
        want = np.cumsum(x, axis=-1, dtype=np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_sequential_cumsum_until_stops_after_the_tile_where_the_limit_is_reached(cell_library):
    """SequentialCumSumUntil sums as SequentialCumSum does up to the end of the first 2,048-wide
    tile whose last exclusive sum (y - x) reaches the row's limit, and writes +inf past it:
    sorted probabilities with limits reached in the first tile, a later one, at the row's end
    and never (1.0, 2.0), and a limit of 0 (reached at once)."""
    rng = np.random.default_rng(5)
    rows, n, tile = 6, 49152, 2048
    alpha = np.array([0.05, 0.05, 2.0, 2.0, 0.05, 0.05])[:, None]
    x = np.sort(rng.gamma(alpha, size=(rows, n)), axis=-1)[:, ::-1]
    x = (x / x.sum(-1, keepdims=True)).astype(np.float32)
    limit = np.array([[0.5], [0.9], [0.9], [1.0], [2.0], [0.0]], np.float32)
    (got,) = run_node(cell_library, "SequentialCumSumUntil", {"x": x, "limit": limit}, ["y"])
    sums = np.cumsum(x, axis=-1, dtype=np.float32)
    exclusive = sums - x
    want = sums.copy()
    for r in range(rows):
        ends = np.arange(tile - 1, n + tile - 1, tile).clip(max=n - 1)
        reached = [e for e in ends if exclusive[r, e] >= limit[r, 0]]
        if reached:
            want[r, reached[0] + 1:] = np.inf
    stopped = np.isinf(want).any(-1)
    assert stopped.tolist() == [True, True, True, False, False, True]  # the cases above
    assert np.isinf(want[2]).sum() < n - tile  # a row stopped after a later tile
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_sort_descending_is_topks_order(cell_library):
    """SortDescending orders each row as ONNX Runtime's CPU TopK of the whole row does: by value
    descending, equal values (-0 and +0 among them) by lower index."""
    import onnxruntime as ort

    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 49152)).astype(np.float32)
    x[:, ::3] = np.round(x[:, ::3], 1)  # many ties
    x[1, :4000] = 0.0
    x[1, 2000:3000] = -0.0
    x[2] = 1.5
    values, indices = run_node(cell_library, "SortDescending", {"x": x},
                               ["values", "indices", "scratch"])
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"])
    graph = helper.make_graph(
        [node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info(n, t, None)
         for n, t in (("values", TensorProto.FLOAT), ("indices", TensorProto.INT64))],
        initializer=[helper.make_tensor("k", TensorProto.INT64, [1], [x.shape[1]])])
    model = helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21)])
    want_values, want_indices = ort.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values.view(np.uint32), want_values.view(np.uint32))


@pytest.mark.parametrize("rows,n,k", [(16, 16384, 4), (1, 49152, 8), (5, 1000, 1), (3, 7, 7),
                                      (64, 300, 4), (16, 151936, 4), (3, 49154, 8)])
def test_top_log_softmax_is_topk_of_the_rows_log_softmax(cell_library, rows, n, k):
    """TopLogSoftmax picks each row's k largest in TopK's order (value descending, equal values,
    -0 and +0 among them, by lower index; -inf still chosen where fewer larger values remain)
    and gives their log-softmax within float32's error of float64's."""
    rng = np.random.default_rng(rows + n + k)
    x = (rng.standard_normal((rows, n)) * rng.uniform(1, 8, (rows, 1))).astype(np.float32)
    x[:, ::3] = np.round(x[:, ::3], 1)  # many ties
    if rows >= 3:
        x[1, : n // 2] = 0.0
        x[1, n // 4: n // 2] = -0.0
        x[1, n // 2:] = -np.inf  # only zeros are chosen, first come first
        x[2] = 1.5  # one value everywhere: the first k columns
    values, indices = run_node(cell_library, "TopLogSoftmax", {"x": x}, ["values", "indices"],
                               k=k)
    want = np.argsort(-x, axis=1, kind="stable")[:, :k]  # -0 and +0 compare equal
    np.testing.assert_array_equal(indices, want)
    x64 = x.astype(np.float64)
    peak = x64.max(axis=1, keepdims=True)
    logp = x64 - peak - np.log(np.exp(x64 - peak).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(values, np.take_along_axis(logp, want, 1), rtol=1e-6, atol=2e-5)


@pytest.mark.parametrize("k,n", [(9, 100), (3, 2)])
def test_top_log_softmax_refuses_k_out_of_range(cell_library, k, n):
    with pytest.raises(Exception, match=f"TopLogSoftmax: k {k} for x \\[2, {n}\\]"):
        run_node(cell_library, "TopLogSoftmax", {"x": np.zeros((2, n), np.float32)},
                 ["values", "indices"], k=k)


def test_device_sampler_draws_what_the_host_does(cell_library, tmp_path):
    """The sample graph on the CUDA provider with its sort and sums as SortDescending and
    SequentialCumSumUntil (what ort-cuda loads with CellAttention) draws the host rule's tokens over
    SmolLM2's vocabulary, at every mix of temperature, top_p and top_k; rows whose host draw
    moves within 1e-4 of u or top_p (float32 boundaries) are skipped, and must be rare."""
    from cellspec.export.sampler import GRAPH_FILES, PARAMS, write_sampler_graphs
    from cellspec.runtime.device_sessions import load_session
    from tests.export.test_sampler_graphs import host_sample, is_stable

    vocab, rows = 49152, 36
    write_sampler_graphs(tmp_path, vocab)
    session = load_session(tmp_path / GRAPH_FILES["sample"], ["CUDAExecutionProvider"], "cell")
    rng = np.random.default_rng(8)
    logits = (rng.standard_normal((rows, vocab)) * rng.uniform(1, 6, (rows, 1))).astype(
        np.float32)
    settings = [(t, p, k) for t in (0.0, 0.7, 1.3) for p in (1.0, 0.9, 0.5) for k in (0, 40)]
    params = np.array([[*settings[i % len(settings)], rng.uniform()] for i in range(rows)],
                      np.float32)
    got = session.run(None, {"logits": logits, PARAMS: params})[0]
    stable = [i for i in range(rows) if is_stable(logits[i], params[i])]
    assert len(stable) >= rows - 2
    assert [int(got[i]) for i in stable] == [host_sample(logits[i], params[i]) for i in stable]


@pytest.mark.parametrize("rows,K,N", [(1, 576, 960), (1, 1536, 960), (1, 4096, 960),
                                      (3, 576, 100), (40, 584, 960), (100, 576, 52),
                                      (1, 1004, 960)])  # K not a multiple of 8: cuBLAS
def test_row_matmul_matches_reference(cell_library, rows, K, N):
    rng = np.random.default_rng(rows + K)
    x = rng.standard_normal((rows, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    got = run_node(cell_library, "RowMatMul", {"x": x, "w": w}, ["y"])[0]
    want = x.astype(np.float64) @ w.astype(np.float64).T
    assert got.shape == (rows, N) and got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), want, atol=4e-3, rtol=4e-3)


def test_row_matmul_rounds_a_row_the_same_with_either_number_of_loads_in_flight(cell_library):
    """A Qwen3-8B-shaped o projection (runs of 32 chunks): one row takes the deep build (8 loads
    in flight) where 40 rows take 768 blocks, more waves of it than of the shallow one; the rows'
    outputs are the same bit for bit either way, and with the weight tiled."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 4096)).astype(np.float16)
    w = (rng.standard_normal((4096, 4096)) / 64).astype(np.float16)
    full = run_node(cell_library, "RowMatMul", {"x": x, "w": w}, ["y"])[0]
    for rows in ([7], [0, 39], list(range(17))):
        for weight in (w, tiled(w)):
            part = run_node(cell_library, "RowMatMul", {"x": x[rows], "w": weight}, ["y"])[0]
            assert np.array_equal(part, full[rows]), (rows, weight.ndim)


@pytest.mark.parametrize("rows", [1, 8, 100])
def test_row_matmuls_chained_on_constant_weights_equal_each_alone(cell_library, rows):
    """RowMatMul -> RowMatMulSwiGlu -> RowMatMul with the weights as initializers, each product
    the next one's x: on compute capability 9.0 the 8-row chain launches overlapped, so a
    projection on constant weights prefetches its first weight lines while the previous kernel
    may still run, and reads x only after it ends. Each output
    equals the op run alone with its weights as an input (loaded after), bit for bit, and the
    chain a float64 reference within float16's error."""
    from onnx import numpy_helper

    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 256)).astype(np.float16)
    weights = [(rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float16)
               for shape in [(384, 256), (2 * 192, 384), (256, 192)]]
    ops = ["RowMatMulFloat16", "RowMatMulSwiGluFloat16", "RowMatMulFloat16"]
    names = ["x", "y0", "y1", "y2"]
    nodes = [helper.make_node(op, [names[i], f"w{i}"],
                              [names[i + 1]] + (["scratch"] if "SwiGlu" in op else []),
                              domain="cellspec") for i, op in enumerate(ops)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, x.shape)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT16, None) for n in names[1:]],
        initializer=[numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)])
    chained = cuda_session(cell_library, graph).run(names[1:], {"x": x})
    alone = x
    want = x.astype(np.float64)
    for op, w, got in zip(["RowMatMul", "RowMatMulSwiGlu", "RowMatMul"], weights, chained):
        outputs = ["y", "scratch"] if "SwiGlu" in op else ["y"]
        alone = run_node(cell_library, op, {"x": alone, "w": w}, outputs)[0]
        assert np.array_equal(got, alone), op
        want = want @ w.astype(np.float64).T
        if "SwiGlu" in op:
            gate, up = want[:, :192], want[:, 192:]
            want = gate / (1 + np.exp(-gate)) * up
    np.testing.assert_allclose(chained[-1].astype(np.float64), want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("op, outputs", [("RowMatMul", 100), ("RowMatMulSwiGlu", 52)])
def test_row_matmul_rounds_a_row_the_same_among_any_rows(cell_library, op, outputs):
    """A row's output bit for bit the same alone, among 5, 16, 17, 33 or 64 others in any order,
    and in all 100 (one, two and four tiles of 16 rows a block); K 1,544 ends in a part chunk."""
    rng = np.random.default_rng(11)
    K, N = 1544, outputs * (2 if op == "RowMatMulSwiGlu" else 1)
    x = rng.standard_normal((100, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    names = ["y", "scratch"] if op == "RowMatMulSwiGlu" else ["y"]
    full = run_node(cell_library, op, {"x": x, "w": w}, names)[0]
    for count in (1, 5, 16, 17, 33, 64):
        rows = rng.permutation(100)[:count]
        part = run_node(cell_library, op, {"x": x[rows], "w": w}, names)[0]
        assert np.array_equal(part, full[rows]), count


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_row_matmul_swiglu_is_swiglu_of_row_matmul(cell_library, rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 576)).astype(np.float16)
    w = (rng.standard_normal((2 * 1536, 576)) / 24).astype(np.float16)
    product = run_node(cell_library, "RowMatMul", {"x": x, "w": w}, ["y"])[0]
    separate = run_node(cell_library, "SwiGlu", {"x": product}, ["y"])[0]
    fused = run_node(cell_library, "RowMatMulSwiGlu", {"x": x, "w": w}, ["y", "scratch"])[0]
    assert fused.shape == (rows, 1536)
    assert np.array_equal(fused, separate)


def rotated_like_the_kernels(product: np.ndarray, positions: np.ndarray, heads: int,
                             kv_heads: int, head_dim: int, cos: np.ndarray, sin: np.ndarray):
    """q, k, v of a float16 projection [..., (heads + 2 kv_heads) head_dim], q and k rotated
    (rotate-half) at each row's position clamped into the caches, as the kernels define it: the
    pair's values and the caches as float32, each product rounded to float32, then the sum, then
    float16 (numpy's float32 arithmetic rounds each operation the same way)."""
    half = head_dim // 2
    at = np.clip(positions, 0, len(cos) - 1)
    cs, sn = (c[at][..., None, :].astype(np.float32) for c in (cos, sin))
    parts = np.split(product, [heads * head_dim, (heads + kv_heads) * head_dim], axis=-1)
    out = []
    for part, count in zip(parts[:2], (heads, kv_heads)):
        x = part.astype(np.float32).reshape(*part.shape[:-1], count, head_dim)
        x1, x2 = x[..., :half], x[..., half:]
        pair = np.concatenate([x1 * cs - x2 * sn, x2 * cs + x1 * sn], axis=-1)
        out.append(pair.astype(np.float16).reshape(part.shape))
    return out[0], out[1], parts[2]


@pytest.mark.parametrize("shape,heads,kv_heads,head_dim,K", [
    ((1, 1), 9, 3, 64, 576),  # SmolLM2, one row
    ((4, 5), 9, 3, 64, 576),
    ((2, 40), 4, 2, 128, 512),  # 80 rows: tiles of 64 rows
    ((3, 1), 9, 3, 64, 1004)])  # K not a multiple of 8: cuBLAS, then the rotation kernel
def test_row_matmul_rotary_is_the_rotation_of_row_matmul(cell_library, shape, heads, kv_heads,
                                                         head_dim, K):
    """RowMatMulRotary: RowMatMul's product rotated, bit for bit, positions past the caches
    clamped; and the rotary attention's own rotation (CellRotaryAttention's k_new) the same."""
    rng = np.random.default_rng(K + heads)
    N = (heads + 2 * kv_heads) * head_dim
    x = rng.standard_normal((*shape, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    positions = rng.integers(0, 1100, shape).astype(np.int64)  # some past the 1,024 cached
    angles = np.arange(1024)[:, None] * 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    cos, sin = np.cos(angles).astype(np.float16), np.sin(angles).astype(np.float16)
    product = run_node(cell_library, "RowMatMul", {"x": x, "w": w}, ["y"])[0]
    got = run_node(cell_library, "RowMatMulRotary",
                   {"x": x, "w": w, "cos_cache": cos, "sin_cache": sin, "positions": positions},
                   ["q", "k", "v", "scratch"], num_heads=heads, kv_num_heads=kv_heads)
    want = rotated_like_the_kernels(product, positions, heads, kv_heads, head_dim, cos, sin)
    for name, a, b in zip("qkv", got, want):
        assert a.shape == b.shape and np.array_equal(a, b), name
    S, Q = shape
    cells = rng.standard_normal((CELLS, kv_heads * head_dim)).astype(np.float16)
    mask = np.ones((S, 1, Q, 1 + Q), bool)
    _, k_new, v_new = run_node(
        cell_library, "CellRotaryAttention",
        {"qkv": product, "cos_cache": cos, "sin_cache": sin, "k_pool": cells, "v_pool": cells,
         "cell_table": np.ones((S, 1), np.int64), "attn_mask": mask, "positions": positions},
        ["out", "k_new", "v_new", "q_rot", "partials"], num_heads=heads, kv_num_heads=kv_heads,
        scale=head_dim ** -0.5, by_position=0)
    assert np.array_equal(k_new, got[1]) and np.array_equal(v_new, got[2])


def tiled(w: np.ndarray, sets: int = 1) -> np.ndarray:
    """A RowMatMul weight [N, K] in the kernel's tiled layout [N / 8, K / 32, 8, 32], or with two
    sets of rows (RowMatMulSwiGlu's gate and up) [N / 16, K / 32, 2, 8, 32]."""
    N, K = w.shape
    if sets == 2:
        return np.ascontiguousarray(
            w.reshape(2, N // 16, 8, K // 32, 32).transpose(1, 3, 0, 2, 4))
    return np.ascontiguousarray(w.reshape(N // 8, 8, K // 32, 32).transpose(0, 2, 1, 3))


# (rows, K, N): SmolLM2's projections at a decode step and a verify, and Qwen3-8B-shaped o (256
# blocks: the deep build), qkv and gate/up (384 blocks) at one row
TILED_SHAPES = [(1, 576, 960), (16, 576, 3072), (40, 1536, 576), (100, 576, 960),
                (1, 4096, 4096), (1, 4096, 6144), (1, 4096, 2 * 12288)]


@pytest.mark.parametrize("rows,K,N", TILED_SHAPES)
def test_tiled_row_matmuls_equal_the_untiled_ones_bit_for_bit(cell_library, rows, K, N):
    """RowMatMul, RowMatMulSwiGlu and RowMatMulRotary on a tiled weight (RowMatMulSwiGlu's gate
    and up side by side, the rotary one's rows first in rotary_row_order) give the untiled op's
    outputs bit for bit: the same sums, only the loads' addresses differ."""
    from cellspec.rewrite.kernels import rotary_row_order

    rng = np.random.default_rng(rows + K + N)
    x = rng.standard_normal((rows, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    for op, outputs, sets in (("RowMatMul", ["y"], 1), ("RowMatMulSwiGlu", ["y", "scratch"], 2)):
        want = run_node(cell_library, op, {"x": x, "w": w}, outputs)[0]
        got = run_node(cell_library, op, {"x": x, "w": tiled(w, sets)}, outputs)[0]
        assert got.shape == want.shape and np.array_equal(got, want), op
    heads, kv_heads, head_dim = (9, 3, 64) if N == 960 else (32, 8, 128)
    if N != (heads + 2 * kv_heads) * head_dim:
        return
    positions = rng.integers(0, 1024, (rows,)).astype(np.int64)
    angles = np.arange(1024)[:, None] * 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    feeds = {"x": x, "w": w, "cos_cache": np.cos(angles).astype(np.float16),
             "sin_cache": np.sin(angles).astype(np.float16), "positions": positions}
    names = ["q", "k", "v", "scratch"]
    want = run_node(cell_library, "RowMatMulRotary", feeds, names, num_heads=heads,
                    kv_num_heads=kv_heads)
    feeds["w"] = tiled(w[rotary_row_order(heads, kv_heads, head_dim)])
    got = run_node(cell_library, "RowMatMulRotary", feeds, names, num_heads=heads,
                   kv_num_heads=kv_heads)
    for name, a, b in zip("qkv", got, want):
        assert np.array_equal(a, b), name


@pytest.mark.parametrize("rows", [1, 16])
def test_rewritten_projections_fold_their_tiled_weights_on_the_device(cell_library, rows):
    """MatMuls by [K, N] initializers, after projections_for_cuda, read tiled weights that ONNX
    Runtime folds at load (a Reshape and a Transpose of each initializer, the qkv's rows
    gathered first): the outputs those of the untiled ops on the same weights, bit for bit."""
    from onnx import numpy_helper

    from cellspec.rewrite import projections_for_cuda

    rng = np.random.default_rng(rows)
    K, hidden, inner = 576, 576, 1536
    x = rng.standard_normal((rows, K)).astype(np.float16)
    w_up = (rng.standard_normal((hidden, 2 * inner)) / 24).astype(np.float16)
    w_down = (rng.standard_normal((inner, hidden)) / 40).astype(np.float16)
    nodes = [helper.make_node("MatMul", ["x", "w_up"], ["up"], name="up"),
             helper.make_node("SwiGluFloat16", ["up"], ["glu"], domain="cellspec", name="glu"),
             helper.make_node("MatMul", ["glu", "w_down"], ["y"], name="down")]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        initializer=[numpy_helper.from_array(w_up, "w_up"),
                     numpy_helper.from_array(w_down, "w_down")])
    model = projections_for_cuda(helper.make_model(graph))
    assert [n.input[1] for n in model.graph.node if n.op_type.startswith("RowMatMul")] == \
        ["w_up/tiled", "w_down/tiled"]
    got = cuda_session(cell_library, model.graph).run(["y"], {"x": x})[0]
    glu = run_node(cell_library, "RowMatMulSwiGlu", {"x": x, "w": np.ascontiguousarray(w_up.T)},
                   ["y", "scratch"])[0]
    want = run_node(cell_library, "RowMatMul", {"x": glu, "w": np.ascontiguousarray(w_down.T)},
                    ["y"])[0]
    assert np.array_equal(got, want)


# (rows, K, N): runs of K (row_slices) 8, 8, 4 and 1; K 1,544 ends in a part chunk
WIDE_SHAPES = [(300, 4096, 1024), (200, 1544, 576), (129, 576, 6144), (130, 576, 16384)]


# CELLSPEC_ROW_WIDE: a prompt's rows on row_wgmma_kernel (g; row_wide_kernel's 4 where the build
# has no wgmma), on row_wide_kernel with 4 or 2 tiles of 16 rows a warp, on row_matmul_kernel's
# tiles of 64 rows, or as the plugin chooses (unset)
PROMPT_TILES = ["g", "4", "2", "0", None]


def tile_prompts(monkeypatch, setting):
    if setting is None:
        monkeypatch.delenv("CELLSPEC_ROW_WIDE", raising=False)
    else:
        monkeypatch.setenv("CELLSPEC_ROW_WIDE", setting)


@pytest.mark.parametrize("setting", PROMPT_TILES)
@pytest.mark.parametrize("rows,K,N", WIDE_SHAPES)
def test_a_prompts_rows_round_as_each_row_alone(cell_library, monkeypatch, rows, K, N, setting):
    """More than 64 rows (a prompt) take row_wgmma_kernel, row_wide_kernel or 64-row tiles, 64 or
    fewer row_matmul_kernel's 16-row tiles: every row's outputs of RowMatMul and RowMatMulSwiGlu,
    untiled and tiled, are the same bits among all the rows, alone, among 17 and among 64 (and
    all rows within float16's error of a float64 reference)."""
    tile_prompts(monkeypatch, setting)
    rng = np.random.default_rng(rows + K + N)
    x = rng.standard_normal((rows, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    subsets = [[0], [rows - 1], sorted(rng.permutation(rows)[:17]),
               sorted(rng.permutation(rows)[:64])]
    for op, outputs, sets in (("RowMatMul", ["y"], 1), ("RowMatMulSwiGlu", ["y", "scratch"], 2)):
        full = run_node(cell_library, op, {"x": x, "w": w}, outputs)[0]
        want = x.astype(np.float64) @ w.astype(np.float64).T
        if sets == 2:
            gate, up = want[:, :N // 2], want[:, N // 2:]
            want = gate / (1 + np.exp(-gate)) * up
        np.testing.assert_allclose(full.astype(np.float64), want, atol=2e-2, rtol=2e-2)
        if K % 32 == 0:
            got = run_node(cell_library, op, {"x": x, "w": tiled(w, sets)}, outputs)[0]
            assert np.array_equal(got, full), (op, "tiled")
        for subset in subsets:
            part = run_node(cell_library, op, {"x": x[subset], "w": w}, outputs)[0]
            assert np.array_equal(part, full[subset]), (op, len(subset))


@pytest.mark.parametrize("setting", PROMPT_TILES)
def test_a_prompts_rotated_projection_rounds_as_each_row_alone(cell_library, monkeypatch,
                                                                setting):
    """RowMatMulRotary on 300 rows of a Qwen3-8B-shaped qkv projection (the prompt tiles' rotary
    epilogue), untiled and tiled: q, k and v of each row the same bits as the row's alone."""
    from cellspec.rewrite.kernels import rotary_row_order

    tile_prompts(monkeypatch, setting)
    heads, kv_heads, head_dim, K, rows = 32, 8, 128, 4096, 300
    rng = np.random.default_rng(5)
    N = (heads + 2 * kv_heads) * head_dim
    x = rng.standard_normal((rows, K)).astype(np.float16)
    w = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float16)
    angles = np.arange(2048)[:, None] * 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    feeds = {"x": x, "w": w, "cos_cache": np.cos(angles).astype(np.float16),
             "sin_cache": np.sin(angles).astype(np.float16),
             "positions": rng.integers(0, 2048, (rows,)).astype(np.int64)}
    names, attrs = ["q", "k", "v", "scratch"], {"num_heads": heads, "kv_num_heads": kv_heads}
    full = run_node(cell_library, "RowMatMulRotary", feeds, names, **attrs)
    product = run_node(cell_library, "RowMatMul", {"x": x, "w": w}, ["y"])[0]
    want = rotated_like_the_kernels(product, feeds["positions"], heads, kv_heads, head_dim,
                                    feeds["cos_cache"], feeds["sin_cache"])
    assert all(np.array_equal(a, b) for a, b in zip(full, want))
    tiled_feeds = dict(feeds, w=tiled(w[rotary_row_order(heads, kv_heads, head_dim)]))
    got = run_node(cell_library, "RowMatMulRotary", tiled_feeds, names, **attrs)
    assert all(np.array_equal(a, b) for a, b in zip(got, full))
    for subset in ([0], [rows - 1], list(range(100, 164))):
        part = run_node(cell_library, "RowMatMulRotary",
                        dict(feeds, x=x[subset], positions=feeds["positions"][subset]),
                        names, **attrs)
        for name, a, b in zip("qkv", part, full):
            assert np.array_equal(a, b[subset]), (name, len(subset))


def test_row_matmul_refuses_a_weight_of_another_layout(cell_library):
    x = np.zeros((2, 64), np.float16)
    with pytest.raises(Exception, match="w \\[1, 2, 16, 16\\], expected \\[..., K\\] and "
                                        "\\[N, K\\] \\(or tiled"):
        run_node(cell_library, "RowMatMul", {"x": x, "w": np.zeros((1, 2, 16, 16), np.float16)},
                 ["y"])
    with pytest.raises(Exception, match="expected \\[..., K\\] and \\[2 I, K\\] \\(or "
                                        "tiled: \\[I / 8, K / 32, 2, 8, 32\\]"):
        run_node(cell_library, "RowMatMulSwiGlu",
                 {"x": x, "w": np.zeros((1, 2, 8, 32), np.float16)}, ["y", "scratch"])


def test_row_matmul_rotary_refuses_positions_not_one_per_row(cell_library):
    x = np.zeros((2, 3, 64), np.float16)
    w = np.zeros(((2 + 2) * 16, 64), np.float16)
    cos = np.ones((8, 8), np.float16)
    with pytest.raises(Exception, match="positions \\[2, 2\\], expected one per row"):
        run_node(cell_library, "RowMatMulRotary",
                 {"x": x, "w": w, "cos_cache": cos, "sin_cache": cos,
                  "positions": np.zeros((2, 2), np.int64)},
                 ["q", "k", "v", "scratch"], num_heads=2, kv_num_heads=1)


@pytest.mark.parametrize("setting", ["1", "0"])
def test_the_tensor_core_chunk_keeps_every_attention_promise(cell_library, setting):
    """CELLSPEC_CUDA_MMA_ATTENTION (read once per process: a child pytest) set to 1, float16 steps
    of every head run mma_chunk_kernel; set to 0, none do (by default heads of 128 dimensions do,
    64 do not). Either way every CellAttention test above passes: the reference, a row alone / in
    a batch / in a larger bucket, a verified key as a cell, wide verifies, Qwen3-8B's heads, the
    rotary ops."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    tests = ("test_matches_reference or alone_in_a_batch or verified_key or four_heads or "
             "rotary_attention or wide_verify")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(Path(__file__).relative_to(root)), "-k", tests], cwd=root,
                          env={**os.environ, "CELLSPEC_CUDA_MMA_ATTENTION": setting},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:]
