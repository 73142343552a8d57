"""Split a packed step into slices the target's methods can run.

Static widths first: a remainder that a static width holds runs at the narrowest static width
that holds it (one padded slice, never split where a wider static method fits). What no static
width holds runs on the dynamic method (up to its bound, unpadded) or, without one, in slices
of the widest static width.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


@dataclass(frozen=True)
class Slice:
    offset: int  # first packed token of the slice
    length: int  # real tokens in the slice
    width: int  # tokens the method runs, padding included (== length when dynamic)
    is_static: bool


def plan_slices(total: int, static_widths: tuple[int, ...], dynamic_width: int = 0) -> list[Slice]:
    assert total >= 0 and static_widths and list(static_widths) == sorted(set(static_widths))
    assert dynamic_width == 0 or dynamic_width > static_widths[-1]
    widest = static_widths[-1]
    slices: list[Slice] = []
    offset = 0
    while offset < total:
        remaining = total - offset
        if remaining > widest and dynamic_width:
            length = min(remaining, dynamic_width)
            slices.append(Slice(offset, length, length, False))
        elif remaining >= widest:
            length = widest
            slices.append(Slice(offset, length, widest, True))
        else:
            length = remaining
            width = static_widths[bisect_left(static_widths, remaining)]
            slices.append(Slice(offset, length, width, True))
        offset += length
    return slices
