"""Block-quantized weights in ONNX Runtime's MatMulNBits layout: GGUF blocks and RTN.

A `BlockQuantized` holds an [N, K] weight (N = out_features rows, K = in_features) as codes q in
blocks of `block_size` along K, with one scale s and zero point z per block:

    uint8 z:    W = (q - z) * s              one rounding: MLAS' kernels (4 bits prepacked)
    float z:    W = q * s + (-s * z)         three roundings: ORT's unpacked CPU kernel, which
                                             dequantizes all of B on every call (slow)
    + offsets:  W = (q - z) * s + offset     offset: float32 per block, added in the graph as
                                             (per-block sums of x) @ offsets (quant_graph.py)

`dequantize` evaluates exactly these float32 expressions, the ones ONNX Runtime 1.32's CPU kernels
evaluate (tests/export/test_quant.py checks it bit for bit through an identity matrix).

GGUF blocks map exactly: Q8_0 (W = d * q8) as q8 + 128 with uint8 z = 128; Q4_0 (d * (q - 8))
with uint8 z = 8; Q4_1 (W = d * q + m) with the uint8 z nearest -m / d and offset m + z * d,
exact in float32 for every block of SmolLM2 (a block where it is not takes z = 0, offset m).
Q4_1's single-op form with float zero points z = -m/d (`fold_offsets`) is exact only where some
float32 z gives fl(-d * z) == m: about 90% of SmolLM2's blocks; elsewhere it is one ulp of m off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cellspec.errors import InvalidArgument

SUPPORTED_BITS = (4, 8)
GGUF_BLOCK_SIZE = 32  # Q4_0, Q4_1 and Q8_0 blocks hold 32 weights


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidArgument(message)


def _check_format(bits: int, block_size: int) -> None:
    _require(bits in SUPPORTED_BITS, f"bits {bits} is not one of {SUPPORTED_BITS}")
    _require(block_size >= 16 and block_size & (block_size - 1) == 0,
             f"block_size {block_size} is not a power of two >= 16")


def pack_codes(codes: np.ndarray, bits: int, block_size: int) -> np.ndarray:
    """uint8 codes [N, num_blocks * block_size] -> MatMulNBits' B [N, num_blocks, block_size *
    bits / 8]; 4-bit: code 2j in the low nibble of byte j, code 2j + 1 in its high nibble."""
    if bits == 4:
        codes = codes[:, 0::2] | (codes[:, 1::2] << 4)
    packed = np.ascontiguousarray(codes, dtype=np.uint8)
    return packed.reshape(len(packed), -1, block_size * bits // 8)


def unpack_codes(data: np.ndarray, bits: int) -> np.ndarray:
    """The inverse of `pack_codes`: B [N, num_blocks, bytes] -> codes [N, num_blocks * block]."""
    flat = data.reshape(len(data), -1)
    if bits == 8:
        return flat
    codes = np.empty((len(flat), 2 * flat.shape[1]), dtype=np.uint8)
    codes[:, 0::2], codes[:, 1::2] = flat & 0x0F, flat >> 4
    return codes


@dataclass(frozen=True, eq=False)
class BlockQuantized:
    """An [N, K] weight as MatMulNBits blocks; W[n, k] per the module docstring's formulas."""

    bits: int
    block_size: int
    shape: tuple[int, int]  # (N, K): out_features, in_features
    data: np.ndarray  # uint8 [N, num_blocks, block_size * bits / 8]: MatMulNBits' B
    scales: np.ndarray  # float32 [N, num_blocks]
    zero_points: np.ndarray  # uint8 [N, num_blocks], one code each; float32 for 4 bits only
    offsets: np.ndarray | None = None  # float32 [N, num_blocks], added after scaling

    def __post_init__(self) -> None:
        rows, cols = self.shape
        _check_format(self.bits, self.block_size)
        blocks = (rows, self.num_blocks)
        packed = (*blocks, self.block_size * self.bits // 8)
        _require(self.data.dtype == np.uint8 and self.data.shape == packed,
                 f"data is {self.data.dtype} {self.data.shape}, expected uint8 {packed}")
        _require(self.scales.dtype == np.float32 and self.scales.shape == blocks,
                 f"scales are {self.scales.dtype} {self.scales.shape}, expected float32 {blocks}")
        zp_dtypes = (np.uint8, np.float32) if self.bits == 4 else (np.uint8,)
        _require(self.zero_points.dtype in zp_dtypes and self.zero_points.shape == blocks,
                 f"zero_points are {self.zero_points.dtype} {self.zero_points.shape}, "
                 f"expected {' or '.join(np.dtype(t).name for t in zp_dtypes)} {blocks}")
        if self.offsets is not None:
            _require(self.offsets.dtype == np.float32 and self.offsets.shape == blocks,
                     f"offsets are {self.offsets.dtype} {self.offsets.shape}, expected {blocks}")
            _require(cols % self.block_size == 0,
                     f"offsets need K {cols} to be a multiple of block_size {self.block_size}")

    @property
    def num_blocks(self) -> int:
        return -(-self.shape[1] // self.block_size)

    @property
    def has_float_zero_points(self) -> bool:
        return self.zero_points.dtype == np.float32

    @property
    def has_default_zero_points(self) -> bool:
        """Every zero point is MatMulNBits' default code 2^(bits-1) (Q8_0's 128, Q4_0's 8),
        so the graph leaves them out."""
        return not self.has_float_zero_points and bool(
            np.all(self.zero_points == 1 << (self.bits - 1)))

    @property
    def nbytes(self) -> int:
        """Bytes of its MatMulNBits initializers (4-bit uint8 zero points packed two a byte)."""
        zero_points = self.zero_points.nbytes
        if self.has_default_zero_points:
            zero_points = 0
        elif self.bits == 4 and not self.has_float_zero_points:
            zero_points = self.shape[0] * -(-self.num_blocks // 2)
        offsets = 0 if self.offsets is None else self.offsets.nbytes
        return self.data.nbytes + self.scales.nbytes + zero_points + offsets

    def codes(self) -> np.ndarray:
        """uint8 [N, num_blocks * block_size], padding past K included."""
        return unpack_codes(self.data, self.bits)

    def dequantize(self) -> np.ndarray:
        """float32 [N, K], rounded as ONNX Runtime's CPU kernels round: what MatMulNBits (plus
        the offsets MatMul) gives for a one-hot row of x, bit for bit."""
        rows, cols = self.shape
        q = self.codes().reshape(rows, self.num_blocks, self.block_size).astype(np.float32)
        s, z = self.scales[..., None], self.zero_points[..., None]
        w = q * s + (-s * z) if self.has_float_zero_points else (q - z.astype(np.float32)) * s
        if self.offsets is not None:
            w = w + self.offsets[..., None]
        return w.reshape(rows, -1)[:, :cols]

    def take_rows(self, index: Any) -> BlockQuantized:
        """Rows `index` (int array or slice) in that order: un-permute q/k rows, slice a fusion."""
        offsets = None if self.offsets is None else self.offsets[index]
        scales = self.scales[index]
        return BlockQuantized(self.bits, self.block_size, (len(scales), self.shape[1]),
                              self.data[index], scales, self.zero_points[index], offsets)

    @classmethod
    def concat(cls, parts: Sequence[BlockQuantized]) -> BlockQuantized:
        """Stack along N (fused q/k/v, gate/up); a part without offsets gets zero offsets."""
        def layout(q: BlockQuantized) -> tuple:
            return q.bits, q.block_size, q.shape[1], q.zero_points.dtype.name

        first = parts[0]
        for part in parts:
            _require(layout(part) == layout(first),
                     f"cannot concatenate (bits, block_size, K, zero point dtype) "
                     f"{layout(part)} with {layout(first)}")
        offsets = None
        if any(part.offsets is not None for part in parts):
            offsets = np.concatenate([np.zeros_like(p.scales) if p.offsets is None else p.offsets
                                      for p in parts])
        rows = sum(part.shape[0] for part in parts)
        return cls(first.bits, first.block_size, (rows, first.shape[1]),
                   *(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("data", "scales", "zero_points")), offsets)

    def fold_offsets(self) -> BlockQuantized:
        """The single-op form: 4-bit, float zero points z' = z - offset / s, no offsets. z' is
        the float32 whose fl(-s * z') lands nearest offset - z * s, so not always exact. Blocks
        with s == 0 become q = 0, z' = -1, s' = offset: q * s' + (-s' * z') == offset exactly."""
        _require(self.bits == 4 and self.offsets is not None and not self.has_float_zero_points,
                 "fold_offsets needs 4-bit uint8 zero points and offsets")
        z = self.zero_points.astype(np.float32)
        target = self.offsets - z * self.scales  # the additive term -s * z' must produce
        flat = self.scales == 0
        scales = np.where(flat, self.offsets, self.scales)
        with np.errstate(divide="ignore", invalid="ignore"):
            guess = np.where(flat, np.float32(-1), -target / self.scales).astype(np.float32)
        candidates = np.stack([guess, np.nextafter(guess, np.float32(np.inf)),
                               np.nextafter(guess, np.float32(-np.inf))])
        miss = np.abs(-scales * candidates - target)  # s == 0: target == offset
        zero_points = np.take_along_axis(candidates, miss.argmin(axis=0)[None], axis=0)[0]
        data = self.data.copy()
        data[flat] = 0
        return BlockQuantized(4, self.block_size, self.shape, data, scales.astype(np.float32),
                              zero_points)


def quantize_rtn(weight: np.ndarray, bits: int = 4, block_size: int = 32) -> BlockQuantized:
    """Round-to-nearest, asymmetric, per block of `block_size` along K, uint8 zero points.

    Each block's range [lo, hi] = [min(w, 0), max(w, 0)] gives s = (hi - lo) / (2^bits - 1) and
    the integer z = round(-lo / s), so 0 is exact and |W - w| <= s / 2 (a shifted grid end
    still lies within s / 2 of lo or hi). uint8 rather than float zero points: ORT's CPU kernel
    packs uint8 ones, but float ones force it to dequantize all of B on every call. K past a
    multiple of block_size is padded with zeros (MatMulNBits' B holds ceil(K / block) blocks).
    """
    _check_format(bits, block_size)
    w = np.asarray(weight, dtype=np.float32)
    _require(w.ndim == 2, f"weight has shape {w.shape}, expected [N, K]")
    _require(bool(np.isfinite(w).all()), "weight has non-finite values")
    rows, cols = w.shape
    padded = np.zeros((rows, -(-cols // block_size) * block_size), dtype=np.float32)
    padded[:, :cols] = w
    blocks = padded.reshape(rows, -1, block_size)
    top = 2**bits - 1
    lo, hi = np.minimum(blocks.min(axis=-1), 0), np.maximum(blocks.max(axis=-1), 0)
    scales = ((hi - lo) / np.float32(top)).astype(np.float32)
    safe = np.where(scales > 0, scales, np.float32(1))  # an all-zero block: s = 0, q = z = 0
    zero_points = np.clip(np.rint(-lo / safe), 0, top)
    codes = np.clip(np.rint(blocks / safe[..., None]) + zero_points[..., None], 0, top)
    data = pack_codes(codes.astype(np.uint8).reshape(rows, -1), bits, block_size)
    return BlockQuantized(bits, block_size, (rows, cols), data, scales,
                          zero_points.astype(np.uint8))


def from_gguf_tensor(tensor: Any) -> BlockQuantized | None:
    """A Q4_0, Q4_1 or Q8_0 matrix of a `gguf.GGUFReader` as exact MatMulNBits blocks (module
    docstring); None for any other type or rank. `tensor.data` holds the raw blocks, row-major."""
    reader = _GGUF_READERS.get(tensor.tensor_type.name)
    if reader is None or len(tensor.shape) != 2:
        return None
    cols, rows = (int(n) for n in tensor.shape)  # GGUF lists the fastest axis first
    assert cols % GGUF_BLOCK_SIZE == 0, (tensor.name, cols)
    raw = np.asarray(tensor.data, dtype=np.uint8).reshape(rows, cols // GGUF_BLOCK_SIZE, -1)
    return reader(raw)


def _fp16(raw: np.ndarray) -> np.ndarray:
    """Two bytes [..., 2] as their little-endian float16, widened exactly to float32 [...]."""
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def _ggml_nibbles(raw: np.ndarray) -> np.ndarray:
    """ggml's 16 bytes per 32 weights [N, blocks, 16] -> codes [N, blocks * 32]: the low
    nibbles hold weights 0..15 and the high nibbles 16..31 (MatMulNBits interleaves them)."""
    return np.concatenate([raw & 0x0F, raw >> 4], axis=-1).reshape(len(raw), -1)


def _blocks(codes: np.ndarray, bits: int, scales: np.ndarray, zero_points: np.ndarray | int,
            offsets: np.ndarray | None = None) -> BlockQuantized:
    rows, cols = codes.shape
    data = pack_codes(codes, bits, GGUF_BLOCK_SIZE)
    zero_points = np.broadcast_to(np.asarray(zero_points, dtype=np.uint8), scales.shape).copy()
    return BlockQuantized(bits, GGUF_BLOCK_SIZE, (rows, cols), data, scales, zero_points, offsets)


def _from_q8_0(raw: np.ndarray) -> BlockQuantized:
    # block: float16 d, int8 q[32]; W = d * q. q + 128 == q's two's complement byte ^ 0x80.
    return _blocks((raw[..., 2:] ^ 0x80).reshape(len(raw), -1), 8, _fp16(raw[..., :2]), 128)


def _from_q4_0(raw: np.ndarray) -> BlockQuantized:
    # block: float16 d, 16 bytes of nibbles; W = d * (q - 8).
    return _blocks(_ggml_nibbles(raw[..., 2:]), 4, _fp16(raw[..., :2]), 8)


def _from_q4_1(raw: np.ndarray) -> BlockQuantized:
    # block: float16 d, float16 m, 16 bytes of nibbles; W = d * q + m = (q - z) * d + (m + z * d).
    d, m = _fp16(raw[..., :2]), _fp16(raw[..., 2:4])
    zero_points = _centered_zero_points(d, m)  # float32 codes 0..15
    offsets = (m + zero_points * d).astype(np.float32)
    return _blocks(_ggml_nibbles(raw[..., 4:]), 4, d, zero_points, offsets)


def _centered_zero_points(d: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Per Q4_1 block the code z nearest -m / d (so (q - z) * d is centred and the offset
    m + z * d is at most d / 2) where m + z * d is exact in float32, else 0 (offset m).
    Exact offsets keep W bit-identical: (q - z) * d is exact, so fl((q - z) * d + offset) is
    fl(d * q + m). Centring matters for accuracy_level 4, which rounds x to int8."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(d != 0, np.clip(np.rint(-m / d), 0, 15), 0).astype(np.float32)
    offsets = m + z * d  # float32
    exact = offsets.astype(np.float64) - m == z.astype(np.float64) * d
    return np.where(exact, z, 0).astype(np.float32)


_GGUF_READERS = {"Q8_0": _from_q8_0, "Q4_0": _from_q4_0, "Q4_1": _from_q4_1}
