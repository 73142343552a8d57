"""What an export produces: dtype, the target's method widths, cache and context bounds, taps."""

from __future__ import annotations

from dataclasses import dataclass

from cellspec.artifact import DTYPES, QUANTIZATIONS
from cellspec.errors import InvalidArgument

__all__ = ["DTYPES", "ExportConfig", "QUANTIZE"]
QUANTIZE = QUANTIZATIONS
DEFAULT_MAX_CONTEXT = 4096
DEFAULT_MAX_CELLS = 8192
MAX_CELLS_LIMIT = 1 << 22  # 4M cells: beyond any context a host pool can hold


@dataclass(frozen=True)
class ExportConfig:
    """How to export a checkpoint. Values the checkpoint decides (vocab, layers) are not here.

    dtype: weights and activations of the graphs; logits are always float32.
    static_widths: the target's fixed step widths, ascending.
    dynamic_width: bound of the dynamic method (0 = none); must exceed the widest static width.
    max_context: positions per session; None = min(max_position_embeddings, 4096).
    max_cells: cells in the pool (one is the scratch cell); None = 8192.
    taps: decoder layer ids (0-based) whose outputs the target graph returns as `taps`.
    batch_buckets: the row counts of static pieces (a GPU backend captures one graph each).
    quantize: "int4" stores every projection as 4-bit blocks (MatMulNBits): a GGUF's Q4_1/Q4_0
        blocks as they are (its Q8_0 embedding as 8-bit blocks), other weights by
        round-to-nearest in blocks of 32; "none" stores them in `dtype`.
    accuracy_level: MatMulNBits' compute precision on the CPU with quantize "int4" (4: int8
        activations, 2-4x faster at a few rows, not exact; 0: float arithmetic).
    """

    dtype: str = "float32"
    static_widths: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    dynamic_width: int = 256
    max_context: int | None = None
    max_cells: int | None = None
    taps: tuple[int, ...] = ()
    batch_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    quantize: str = "none"
    accuracy_level: int = 4

    def __post_init__(self) -> None:
        if self.quantize not in QUANTIZE:
            raise InvalidArgument(f"quantize {self.quantize!r}: expected one of "
                                  f"{', '.join(QUANTIZE)}")
        if self.accuracy_level not in (0, 1, 2, 3, 4):
            raise InvalidArgument(f"accuracy_level {self.accuracy_level!r}: expected 0..4")
        buckets = tuple(self.batch_buckets)
        if not buckets or not all(_is_int(b) and b > 0 for b in buckets) \
                or list(buckets) != sorted(set(buckets)):
            raise InvalidArgument(f"batch_buckets {list(buckets)}: expected ascending positive "
                                  "integers")
        object.__setattr__(self, "batch_buckets", buckets)
        if self.dtype not in DTYPES:
            raise InvalidArgument(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        widths = tuple(self.static_widths)
        if not widths or not all(_is_int(w) and w > 0 for w in widths):
            raise InvalidArgument(f"static_widths {list(widths)}: expected positive integers")
        if list(widths) != sorted(set(widths)):
            raise InvalidArgument(f"static_widths {list(widths)}: expected ascending, no "
                                  "duplicates")
        dyn = self.dynamic_width
        if not _is_int(dyn) or dyn < 0 or (dyn != 0 and dyn <= widths[-1]):
            raise InvalidArgument(
                f"dynamic_width {dyn!r}: expected 0 (none) or an integer > {widths[-1]}")
        if self.max_context is not None and not (_is_int(self.max_context)
                                                 and self.max_context > 0):
            raise InvalidArgument(f"max_context {self.max_context!r}: expected an integer > 0")
        cells = self.resolved_max_cells
        if not _is_int(cells) or not self.max_step_width < cells <= MAX_CELLS_LIMIT:
            raise InvalidArgument(
                f"max_cells {self.max_cells!r}: expected an integer > the widest step "
                f"({self.max_step_width}) and <= {MAX_CELLS_LIMIT}")
        taps = tuple(self.taps)
        if not all(_is_int(t) and t >= 0 for t in taps) or len(set(taps)) != len(taps):
            raise InvalidArgument(f"taps {list(taps)}: expected distinct layer ids >= 0")
        object.__setattr__(self, "static_widths", widths)
        object.__setattr__(self, "taps", taps)

    @property
    def max_step_width(self) -> int:
        return max(self.static_widths[-1], self.dynamic_width)

    @property
    def resolved_max_cells(self) -> int:
        return DEFAULT_MAX_CELLS if self.max_cells is None else self.max_cells

    def resolved_max_context(self, max_position_embeddings: int) -> int:
        """max_context, or the default bounded by the model's trained length."""
        if self.max_context is None:
            return min(max_position_embeddings, DEFAULT_MAX_CONTEXT)
        return self.max_context


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
