"""What ONNX Runtime's CPU `Attention` (opset 23) does with a query row's bits, measured on the op
alone: the premises of `test_a_verify_row_equals_the_plain_step_bit_for_bit` (a strict expected
failure) and of the fix docs/design.md proposes for it. A query's output depends on whether it is
alone in its step, and on the columns its keys sit at; with every key at its position's column
and never one query alone, a verify row equals the plain step of the same token bit for bit."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

HEADS, KV_HEADS, HEAD_DIM, TOKENS = 9, 3, 64, 160


@pytest.fixture(scope="module")
def attention():
    node = helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], q_num_heads=HEADS,
                            kv_num_heads=KV_HEADS, scale=HEAD_DIM ** -0.5, softmax_precision=1)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [node], "attention",
        [helper.make_tensor_value_info("q", f, ["S", "Q", HEADS * HEAD_DIM]),
         helper.make_tensor_value_info("k", f, ["S", "L", KV_HEADS * HEAD_DIM]),
         helper.make_tensor_value_info("v", f, ["S", "L", KV_HEADS * HEAD_DIM]),
         helper.make_tensor_value_info("mask", TensorProto.BOOL, ["S", 1, "Q", "L"])],
        [helper.make_tensor_value_info("y", f, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    keys, values = (rng.standard_normal((TOKENS, KV_HEADS * HEAD_DIM)).astype(np.float32)
                    for _ in range(2))
    queries = rng.standard_normal((TOKENS, HEADS * HEAD_DIM)).astype(np.float32)

    def run(first, count, columns, by_position, dummy):
        """Queries of positions first .. first + count - 1, causal, each seeing keys 0 .. its
        own. by_position: key q at column q; else as cellspec lays a step out today, the keys
        before `first` at their positions (cells) and the step's own at columns - count ..
        (new tokens after a multiple of 64 cells). dummy: one more query, seeing column 0."""
        k = np.zeros((1, columns, KV_HEADS * HEAD_DIM), np.float32)
        v = np.zeros_like(k)
        new_at = first if by_position else columns - count
        k[0, :first], v[0, :first] = keys[:first], values[:first]
        k[0, new_at:new_at + count] = keys[first:first + count]
        v[0, new_at:new_at + count] = values[first:first + count]
        rows = count + dummy
        q = np.zeros((1, rows, HEADS * HEAD_DIM), np.float32)
        q[0, :count] = queries[first:first + count]
        mask = np.zeros((1, 1, rows, columns), bool)
        for i in range(count):
            mask[0, 0, i, :first] = True
            mask[0, 0, i, new_at:new_at + i + 1] = True
        if dummy:
            mask[0, 0, count, 0] = True
        return session.run(None, {"q": q, "k": k, "v": v, "mask": mask})[0][0, :count]

    return run


def verify_against_plain(run, by_position, dummy):
    """(rows equal, rows compared): a 4-token step against the 4 one-token steps after the same
    prefix, for prefixes of 30-69 tokens, with the step and the verify in equal and in different
    cell buckets."""
    equal = total = 0
    for first in range(30, 70):
        for plain_columns, verify_columns in ((128, 128), (128, 192)):
            pad = 0 if by_position else 64  # today's layout: cells, padding, then the new tokens
            verify = run(first, 4, verify_columns + pad, by_position, dummy)
            for j in range(4):
                plain = run(first + j, 1, plain_columns + pad, by_position, dummy)[0]
                equal += np.array_equal(plain, verify[j])
                total += 1
    return equal, total


def test_a_lone_query_rounds_differently_from_the_same_query_among_others(attention):
    alone = attention(40, 1, 128, True, False)[0]
    assert not np.array_equal(alone, attention(40, 2, 128, True, False)[0])
    with_dummy = attention(40, 1, 128, True, True)[0]
    assert all(np.array_equal(with_dummy, attention(40, count, 128, True, False)[0])
               for count in range(2, 9))


def test_today_no_verify_row_is_the_plain_step(attention):
    assert verify_against_plain(attention, by_position=False, dummy=False) == (0, 320)


def test_keys_by_position_and_no_lone_query_make_a_verify_row_the_plain_step(attention):
    assert verify_against_plain(attention, by_position=True, dummy=True) == (320, 320)
    # either half alone is not enough: the lone query, or the keys' columns (SIMD lanes; with
    # today's layout and a dummy query, rows agree only where the columns happen to align)
    assert verify_against_plain(attention, by_position=True, dummy=False)[0] == 0
    assert verify_against_plain(attention, by_position=False, dummy=True)[0] < 320
