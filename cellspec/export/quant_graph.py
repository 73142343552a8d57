"""The initializers of `BlockQuantized` weights as ONNX Runtime's contrib MatMulNBits and
GatherBlockQuantized read them, and the `QuantLinear` that describes them to the graph builder
(export/graph.py's `make_linear` and `make_embedding` emit the nodes). Names derive from a prefix:

    {prefix}.qweight            uint8 [N, num_blocks, block * bits / 8]    (both ops share it)
    {prefix}.scales             float [N, num_blocks]
    {prefix}.zero_points        4-bit uint8: [N, ceil(num_blocks / 2)], two a byte, even block
                                low; 8-bit uint8: [N, num_blocks]; float: [N, num_blocks]
    {prefix}.offsets            float [num_blocks, N], only for weights with offsets (Q4_1)
    {prefix}.gather_scales      float [N, num_blocks, 1]: GatherBlockQuantized wants the rank
    {prefix}.gather_zero_points uint8 [N, num_blocks, 1]  of qweight (MatMulNBits refuses it)
"""

from __future__ import annotations

import numpy as np

from cellspec.errors import InvalidArgument
from cellspec.export.graph import QuantLinear
from cellspec.export.quant import BlockQuantized


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


def quant_linear(q: BlockQuantized, prefix: str) -> QuantLinear:
    """How the graph builder sees the blocks of `q` [N, K] stored under `prefix`."""
    return QuantLinear(prefix, q.shape[1], q.shape[0], q.bits, q.block_size,
                       q.offsets is not None, not q.has_default_zero_points)


def _check_gatherable(q: BlockQuantized) -> None:
    if q.has_float_zero_points or q.offsets is not None or q.shape[1] % q.block_size:
        raise InvalidArgument(
            f"GatherBlockQuantized needs uint8 zero points, no offsets and K {q.shape[1]} a "
            f"multiple of block_size {q.block_size}; gather rows of dequantize() instead"
        )
