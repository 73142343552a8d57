"""Manifest fields one at a time: JSON objects made into dataclasses, and the value checks.

Every refusal is an `InvalidArtifact` naming the field the way the JSON spells its path:
`manifest field draft.max_owners: 0, expected an integer >= 1`.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, fields
from numbers import Integral, Real
from pathlib import PurePosixPath
from typing import Any

from cellspec.errors import InvalidArtifact


def no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def arguments(kind: type, data: dict[str, Any], name: str) -> dict[str, Any]:
    """`data` as keyword arguments of the dataclass `kind`: no unknown or missing field."""
    known = {f.name: f for f in fields(kind)}
    for key in data:
        check(key in known, join(name, key), "unknown field")
    for key, spec in known.items():
        is_required = spec.default is MISSING and spec.default_factory is MISSING
        check(key in data or not is_required, join(name, key), "missing")
    return dict(data)


def make(kind: type, data: Any, name: str, lists: tuple[str, ...] = ()) -> Any:
    """The dataclass `kind` from a JSON object; the fields named in `lists` become tuples."""
    check(isinstance(data, dict), name, f"{short(data)}, expected an object")
    args = arguments(kind, data, name)
    for key in lists:
        if key in args:
            args[key] = tuple(list_of(args[key], f"{name}.{key}"))
    return kind(**args)


def list_of(value: Any, name: str) -> list[Any]:
    check(isinstance(value, (list, tuple)), name, f"{short(value)}, expected a list")
    return list(value)


def join(name: str, key: str) -> str:
    return key if name == "manifest" else f"{name}.{key}"


def check_list(values: Any, name: str, kind: type) -> None:
    check(isinstance(values, tuple) and all(isinstance(v, kind) for v in values), name,
          f"{short(values)}, expected a list of objects")


def is_int(value: Any) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def check_int(value: Any, name: str, minimum: int) -> None:
    check(is_int(value) and value >= minimum, name,
          f"{short(value)}, expected an integer >= {minimum}")


def check_ints(values: Any, name: str, minimum: int) -> None:
    check(isinstance(values, tuple) and all(is_int(v) and v >= minimum for v in values), name,
          f"{short(values)}, expected a list of integers >= {minimum}")


def check_token(value: Any, name: str, vocab_size: int) -> None:
    check(is_int(value) and 0 <= value < vocab_size, name,
          f"{short(value)}, expected a token id in 0..{vocab_size - 1}")


def check_file(value: Any, name: str) -> None:
    """A file of the artifact: a relative path that stays inside its folder."""
    path = PurePosixPath(value) if isinstance(value, str) else None
    check(path is not None and value != "" and not path.is_absolute() and ".." not in path.parts,
          name, f"{short(value)}, expected a file name inside the artifact")


def short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, BaseException) else str(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check(ok: bool, name: str, detail: str) -> None:
    if not ok:
        raise InvalidArtifact(f"manifest field {name}: {detail}")
