"""One external-data file for every graph of an artifact: each initializer is written once.

`WeightStore.add(name, array)` appends the array to `weights.bin` (64-byte aligned) and returns a
TensorProto that points at it (data_location EXTERNAL, location/offset/length). Adding the same
name again returns the same reference, so a draft graph borrows the target's embedding and LM head
by name and the bytes are stored once. Graphs holding these protos are saved with a plain
`onnx.save(model, path)`: the weights are never re-serialized into the .onnx file.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto

from cellspec.artifact import WEIGHTS_NAME
from cellspec.errors import InvalidArgument, InvalidArtifact

ALIGNMENT = 64
ONNX_DTYPES: dict[str, int] = {
    "float32": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "uint8": TensorProto.UINT8,
}
NUMPY_DTYPES: dict[str, np.dtype] = {
    "uint8": np.dtype(np.uint8),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
}


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype of a cellspec dtype name (bfloat16 through ml_dtypes)."""
    return NUMPY_DTYPES[dtype]


class WeightStore:
    """Appends initializers to `folder/weights.bin`; `close()` (or `with`) when done."""

    def __init__(self, folder: str | Path, *, append: bool = False) -> None:
        """A new, empty weights file; with `append`, continue the existing one and reuse every
        tensor that the folder's .onnx graphs already reference (see `index_graphs`)."""
        self.folder = Path(folder)
        self.path = self.folder / WEIGHTS_NAME
        self._refs: dict[str, TensorProto] = {}
        self.meta: dict[str, object] = {}  # what graphs must know of a stored group (blocks)
        if append and self.path.is_file():
            self.index_graphs()
        self._file = open(self.path, "ab" if append else "wb")  # noqa: SIM115 (closed in close)

    def __enter__(self) -> WeightStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()

    def __contains__(self, name: str) -> bool:
        return name in self._refs

    def get(self, name: str) -> TensorProto:
        """The reference of a tensor already added; KeyError if none."""
        return self._refs[name]

    def names_with_prefix(self, prefix: str) -> list[str]:
        return [name for name in self._refs if name.startswith(prefix)]

    def add(self, name: str, array: np.ndarray) -> TensorProto:
        """Write `array` once under `name`; a second add of that name returns the first reference
        (its shape and dtype must agree)."""
        array = np.ascontiguousarray(array)
        known = self._refs.get(name)
        if known is not None:
            if tuple(known.dims) != array.shape or known.data_type != _onnx_dtype(array.dtype):
                raise InvalidArgument(
                    f"weight {name}: added as {tuple(known.dims)} type {known.data_type}, "
                    f"now as {array.shape} {array.dtype}")
            return known
        padding = -self._file.tell() % ALIGNMENT
        self._file.write(b"\0" * padding)
        offset = self._file.tell()
        data = array.tobytes()
        self._file.write(data)
        self._refs[name] = _external(name, array, offset, len(data))
        return self._refs[name]

    def read(self, name: str) -> np.ndarray:
        """The array of a tensor already added (read back from the file)."""
        tensor = self._refs[name]
        info = {entry.key: entry.value for entry in tensor.external_data}
        self._file.flush()
        dtype = next(NUMPY_DTYPES[n] for n, t in ONNX_DTYPES.items()
                     if t == tensor.data_type and n in NUMPY_DTYPES)
        with open(self.path, "rb") as f:
            f.seek(int(info["offset"]))
            data = f.read(int(info["length"]))
        return np.frombuffer(data, dtype=dtype).reshape(tuple(tensor.dims))

    def index_graphs(self) -> None:
        """Learn the references of every .onnx graph in the folder that points into our file."""
        for graph_path in sorted(self.folder.glob("*.onnx")):
            try:
                model = onnx.load(str(graph_path), load_external_data=False)
            except Exception as error:  # noqa: BLE001 (protobuf raises several types)
                raise InvalidArtifact(f"{graph_path}: not a readable ONNX graph ({error})") \
                    from error
            for tensor in model.graph.initializer:
                location = {e.key: e.value for e in tensor.external_data}.get("location")
                if tensor.data_location == TensorProto.EXTERNAL and location == WEIGHTS_NAME:
                    self._refs.setdefault(tensor.name, tensor)


def _external(name: str, array: np.ndarray, offset: int, length: int) -> TensorProto:
    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = _onnx_dtype(array.dtype)
    tensor.dims.extend(array.shape)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", WEIGHTS_NAME), ("offset", str(offset)),
                       ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _onnx_dtype(dtype: np.dtype) -> int:
    for name, candidate in NUMPY_DTYPES.items():
        if candidate == dtype:
            return ONNX_DTYPES[name]
    raise InvalidArgument(f"weight dtype {dtype}: expected one of {', '.join(NUMPY_DTYPES)}")
