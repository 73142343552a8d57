"""ONNX Runtime contrib nodes for `BlockQuantized` weights: MatMulNBits and GatherBlockQuantized.

A model holding them imports opset `com.microsoft` version 1 next to the default domain. Node
emitters take `emit`, a callable with `GraphBuilder.node`'s contract,
`emit(op, inputs, name=..., **attrs) -> first output name` (a `domain` attribute selects the
contrib domain), so they stay independent of the builder. Initializer names derive from a prefix:

    {prefix}.qweight            uint8 [N, num_blocks, block * bits / 8]    (both ops share it)
    {prefix}.scales             float [N, num_blocks]
    {prefix}.zero_points        4-bit uint8: [N, ceil(num_blocks / 2)], two a byte, even block
                                low; 8-bit uint8: [N, num_blocks]; float: [N, num_blocks]
    {prefix}.offsets            float [num_blocks, N], only for weights with offsets (Q4_1)
    {prefix}.gather_scales      float [N, num_blocks, 1]: GatherBlockQuantized wants the rank
    {prefix}.gather_zero_points uint8 [N, num_blocks, 1]  of qweight (MatMulNBits refuses it)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from cellspec.errors import InvalidArgument
from cellspec.export.quant import BlockQuantized

CONTRIB_DOMAIN = "com.microsoft"
Emit = Callable[..., str]


def initializers(q: BlockQuantized, prefix: str,
                 dtype: np.dtype | type = np.float32) -> dict[str, np.ndarray]:
    """The MatMulNBits arrays of `q` by name; `dtype` is the activation type A (float32 or
    float16: GGUF scales and offsets are float16 values, so float16 keeps them exact)."""
    arrays = {f"{prefix}.qweight": q.data, f"{prefix}.scales": q.scales.astype(dtype)}
    if q.has_default_zero_points:  # left out: MatMulNBits' default, which skips loading them
        pass
    elif q.has_float_zero_points:
        arrays[f"{prefix}.zero_points"] = q.zero_points.astype(dtype)
    elif q.bits == 4:
        pairs = np.zeros((q.shape[0], -(-q.num_blocks // 2) * 2), dtype=np.uint8)
        pairs[:, : q.num_blocks] = q.zero_points
        arrays[f"{prefix}.zero_points"] = pairs[:, 0::2] | (pairs[:, 1::2] << 4)
    else:
        arrays[f"{prefix}.zero_points"] = q.zero_points
    if q.offsets is not None:
        arrays[f"{prefix}.offsets"] = np.ascontiguousarray(q.offsets.T, dtype=dtype)
    return arrays


def gather_initializers(q: BlockQuantized, prefix: str,
                        dtype: np.dtype | type = np.float32) -> dict[str, np.ndarray]:
    """The GatherBlockQuantized arrays besides the shared `{prefix}.qweight`."""
    _check_gatherable(q)
    # 4-bit zero points pack along the last axis: one per [n, block] row, in the low nibble.
    return {f"{prefix}.gather_scales": q.scales[..., None].astype(dtype),
            f"{prefix}.gather_zero_points": q.zero_points[..., None]}


def matmul_nbits_node(name: str, x: str, prefix: str, q: BlockQuantized, output: str,
                      accuracy_level: int = 0) -> onnx.NodeProto:
    """y [..., N] = x [..., K] @ W^T, offsets left out (`make_quantized_linear` adds them).
    accuracy_level 4 quantizes x to int8 per block (faster at one row, not exact); 0 keeps
    float32 arithmetic."""
    inputs = _matmul_inputs(x, prefix, q)
    return helper.make_node("MatMulNBits", inputs, [output], name=name, domain=CONTRIB_DOMAIN,
                            **_matmul_attrs(q, accuracy_level))


def _matmul_inputs(x: str, prefix: str, q: BlockQuantized) -> list[str]:
    zero_points = [] if q.has_default_zero_points else [f"{prefix}.zero_points"]
    return [x, f"{prefix}.qweight", f"{prefix}.scales", *zero_points]


def gather_block_quantized_node(name: str, ids: str, prefix: str, q: BlockQuantized,
                                output: str) -> onnx.NodeProto:
    """Rows `ids` [...] of W -> [..., num_blocks, block_size] (reshape to [..., K] after)."""
    _check_gatherable(q)
    inputs = [f"{prefix}.qweight", ids, f"{prefix}.gather_scales", f"{prefix}.gather_zero_points"]
    return helper.make_node("GatherBlockQuantized", inputs, [output], name=name,
                            domain=CONTRIB_DOMAIN, **_gather_attrs(q))


def make_quantized_linear(emit: Emit, x: str, prefix: str, q: BlockQuantized, name: str,
                          accuracy_level: int = 0, x_rank: int = 2) -> str:
    """x [..., K] (rank `x_rank`) @ W^T -> [..., N]. With offsets (Q4_1), the exact
    y = MatMulNBits(x) + (per-block sums of x) [..., num_blocks] @ offsets [num_blocks, N]."""
    inputs = _matmul_inputs(x, prefix, q)
    y = emit("MatMulNBits", inputs, name=f"{name}/MatMulNBits", domain=CONTRIB_DOMAIN,
             **_matmul_attrs(q, accuracy_level))
    if q.offsets is None:
        return y
    block_shape = [0] * (x_rank - 1) + [q.num_blocks, q.block_size]  # 0 keeps x's dim
    blocks = emit("Reshape", [x, _constant(emit, block_shape, f"{name}/block_shape")],
                  name=f"{name}/blocks/Reshape")
    sums = emit("ReduceSum", [blocks, _constant(emit, [-1], f"{name}/block_axis")],
                name=f"{name}/blocks/ReduceSum", keepdims=0)
    shift = emit("MatMul", [sums, f"{prefix}.offsets"], name=f"{name}/offsets/MatMul")
    return emit("Add", [y, shift], name=f"{name}/Add")


def make_quantized_embedding(emit: Emit, ids: str, prefix: str, q: BlockQuantized, name: str,
                             ids_rank: int = 1) -> str:
    """Rows `ids` [...] (rank `ids_rank`) of W -> [..., K] through GatherBlockQuantized."""
    _check_gatherable(q)
    inputs = [f"{prefix}.qweight", ids, f"{prefix}.gather_scales", f"{prefix}.gather_zero_points"]
    rows = emit("GatherBlockQuantized", inputs, name=f"{name}/GatherBlockQuantized",
                domain=CONTRIB_DOMAIN, **_gather_attrs(q))
    shape = _constant(emit, [0] * ids_rank + [q.shape[1]], f"{name}/shape")
    return emit("Reshape", [rows, shape], name=f"{name}/Reshape")


def _matmul_attrs(q: BlockQuantized, accuracy_level: int) -> dict[str, int]:
    if accuracy_level not in range(5):
        raise InvalidArgument(f"accuracy_level {accuracy_level} is not one of 0..4")
    return {"K": q.shape[1], "N": q.shape[0], "bits": q.bits, "block_size": q.block_size,
            "accuracy_level": accuracy_level}


def _gather_attrs(q: BlockQuantized) -> dict[str, int]:
    # qweight [N, num_blocks, bytes]: gather rows, quantized (one block) along the last axis.
    return {"bits": q.bits, "block_size": q.block_size, "gather_axis": 0, "quantize_axis": 2}


def _check_gatherable(q: BlockQuantized) -> None:
    if q.has_float_zero_points or q.offsets is not None or q.shape[1] % q.block_size:
        raise InvalidArgument(
            f"GatherBlockQuantized needs uint8 zero points, no offsets and K {q.shape[1]} a "
            f"multiple of block_size {q.block_size}; gather rows of dequantize() instead"
        )


def _constant(emit: Emit, values: list[int], name: str) -> str:
    tensor = numpy_helper.from_array(np.array(values, dtype=np.int64), f"{name}/value")
    return emit("Constant", [], name=name, value=tensor)
