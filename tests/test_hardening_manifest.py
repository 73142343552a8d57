"""Manifest.from_dict / load refuse, naming the field, every value the runtime cannot trust."""

import copy
import json

import pytest

from cellspec.artifact import FORMAT_VERSION, Manifest
from cellspec.errors import InvalidArtifact

LAYER = {"kv_heads": 2, "head_dim": 16, "window": 0}
MANIFEST = {
    "model": {"architecture": "qwen3", "vocab_size": 256, "hidden_size": 64, "num_layers": 2,
              "num_heads": 4, "dtype": "float32", "rope_theta": 10000.0, "rope_scaling": None,
              "bos_token_id": 1, "eos_token_ids": [2], "tokenizer": "tokenizer.json",
              "chat_template": None, "name": "tiny"},
    "target_cache": [dict(LAYER), dict(LAYER)],
    "max_cells": 512,
    "max_context": 128,
    "target": {"graph": "target.onnx", "static_widths": [1, 2, 4, 8], "dynamic_width": 32,
               "tap_layer_ids": [0, 1], "batch_buckets": [1, 2, 4, 8], "quantization": "none"},
    "draft_cache": [dict(LAYER), dict(LAYER)],
    "draft": {"context_graph": "draft_context.onnx", "block_graph": "draft_block.onnx",
              "block_size": 5, "tap_layer_ids": [0, 1], "mask_token_id": 255, "max_owners": 4,
              "num_layers": 2},
    "graphs": {"argmax": "argmax.onnx", "sample": "sample.onnx"},
    "engines": [{"graph": "argmax.onnx", "path": "argmax.sm80.plan",
                 "compute_capability": "sm80", "profiles": [{"R": [1, 1, 8]}]}],
    "weights": "weights.bin",
    "format_version": FORMAT_VERSION,
}


def edited(path: str, value: object) -> dict:
    """MANIFEST with the field at `path` ("draft.max_owners", "target_cache.0") set to `value`,
    or removed when `value` is KeyError."""
    data = copy.deepcopy(MANIFEST)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key = int(last) if isinstance(node, list) else last
    if value is KeyError:
        del node[key]
    else:
        node[key] = value
    return data


def test_the_reference_manifest_loads():
    manifest = Manifest.from_dict(MANIFEST)
    assert manifest.draft.max_owners == 4 and manifest.engines[0].profiles == ({"R": [1, 1, 8]},)
    assert Manifest.from_dict(json.loads(manifest.to_json())) == manifest


@pytest.mark.parametrize("path, value, field", [
    ("model.dtype", "int8", "model.dtype"),
    ("model.dtype", None, "model.dtype"),
    ("draft.max_owners", 0, "draft.max_owners"),
    ("draft.max_owners", "4", "draft.max_owners"),
    ("draft.mask_token_id", 256, "draft.mask_token_id"),
    ("draft.mask_token_id", -1, "draft.mask_token_id"),
    ("draft.mask_token_id", None, "draft.mask_token_id"),
    ("draft.block_size", 2, "draft.block_size"),
    ("draft.block_size", "5", "draft.block_size"),
    ("draft.num_layers", 3, "draft_cache"),
    ("draft.proposal_vocab_size", -1, "draft.proposal_vocab_size"),
    ("draft.proposal_vocab_size", "8", "draft.proposal_vocab_size"),
    ("draft.proposal_vocab_size", 257, "draft.proposal_vocab_size"),
    ("draft.num_layers", "2", "draft.num_layers"),
    ("draft_cache", [LAYER], "draft_cache"),
    ("target.graph", None, "target.graph"),
    ("target.batch_buckets", [0, 2], "target.batch_buckets"),
    ("target.batch_buckets", [4, 2], "target.batch_buckets"),
    ("target.quantization", "int3", "target.quantization"),
    ("target.quantization", 4, "target.quantization"),
    ("format_version", 1, "format_version"),
    ("target.graph", 5, "target.graph"),
    ("target.graph", "", "target.graph"),
    ("target.graph", "../outside.onnx", "target.graph"),
    ("draft.context_graph", None, "draft.context_graph"),
    ("draft.block_graph", [1], "draft.block_graph"),
    ("model.num_layers", 0, "model.num_layers"),
    ("model.num_layers", "2", "model.num_layers"),
    ("model.num_layers", 2.0, "model.num_layers"),
    ("model.num_layers", True, "model.num_layers"),
    ("model.vocab_size", -256, "model.vocab_size"),
    ("model.vocab_size", "256", "model.vocab_size"),
    ("model.hidden_size", 0, "model.hidden_size"),
    ("model.hidden_size", 64.5, "model.hidden_size"),
    ("model.num_heads", None, "model.num_heads"),
    ("model.rope_theta", "abc", "model.rope_theta"),
    ("model.rope_theta", -1.0, "model.rope_theta"),
    ("model.rope_scaling", 5, "model.rope_scaling"),
    ("model.bos_token_id", "1", "model.bos_token_id"),
    ("model.bos_token_id", 10**12, "model.bos_token_id"),
    ("model.eos_token_ids", "2", "model.eos_token_ids"),
    ("model.eos_token_ids", [2.5], "model.eos_token_ids"),
    ("model.eos_token_ids", [-1], "model.eos_token_ids"),
    ("model.tokenizer", 5, "model.tokenizer"),
    ("model.chat_template", 5, "model.chat_template"),
    ("model.name", None, "model.name"),
    ("model.architecture", 5, "model.architecture"),
    ("model.colour", "red", "model.colour"),
    ("model.vocab_size", KeyError, "model.vocab_size"),
    ("max_cells", "512", "max_cells"),
    ("max_cells", 512.0, "max_cells"),
    ("max_context", None, "max_context"),
    ("format_version", "1", "format_version"),
    ("target.static_widths", "12", "target.static_widths"),
    ("target.static_widths", ["1", "2"], "target.static_widths"),
    ("target.dynamic_width", "32", "target.dynamic_width"),
    ("target.tap_layer_ids", [0, "1"], "target.tap_layer_ids"),
    ("target.tap_layer_ids", [1, 0], "draft.tap_layer_ids"),
    ("draft.tap_layer_ids", "01", "draft.tap_layer_ids"),
    ("target_cache.0.kv_heads", 0, r"target_cache\[0\].kv_heads"),
    ("target_cache.1.window", -4, r"target_cache\[1\].window"),
    ("draft_cache.1.head_dim", "16", r"draft_cache\[1\].head_dim"),
    ("graphs.sample", None, "graphs.sample"),
    ("weights", 5, "weights"),
    ("engines.0.profiles", 5, r"engines\[0\].profiles"),
    ("engines.0.path", None, r"engines\[0\].path"),
    ("extra", 1, "extra"),
])
def test_a_bad_value_is_refused_naming_its_field(path, value, field):
    with pytest.raises(InvalidArtifact, match=f"manifest field {field}"):
        Manifest.from_dict(edited(path, value))


@pytest.mark.parametrize("path, value", [
    ("model", []), ("model", "x"), ("target", None), ("target", [1]), ("draft", 5),
    ("draft", []), ("target_cache", {}), ("target_cache", "ab"), ("target_cache.0", 5),
    ("draft_cache.0", []), ("graphs", []), ("engines", {}), ("engines.0", "x"),
    ("model.rope_scaling", [1]),
])
def test_a_non_object_where_an_object_belongs_is_refused(path, value):
    field = path.replace(".0", r"\[0\]")
    with pytest.raises(InvalidArtifact, match=f"manifest field {field}"):
        Manifest.from_dict(edited(path, value))


@pytest.mark.parametrize("data", [[], "x", None, 5])
def test_a_manifest_that_is_not_an_object_is_refused(data):
    with pytest.raises(InvalidArtifact, match="expected a JSON object"):
        Manifest.from_dict(data)


@pytest.mark.parametrize("content", [b"\xff\xfe{}", b"[" * 100_000 + b"]" * 100_000,
                                     b'{"model": NaN}'])
def test_an_unreadable_manifest_file_is_refused(tmp_path, content):
    (tmp_path / "manifest.json").write_bytes(content)
    with pytest.raises(InvalidArtifact, match="manifest"):
        Manifest.load(tmp_path)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    from tests.tiny_chat import tiny_chat_artifact

    return tiny_chat_artifact(tmp_path_factory)


@pytest.mark.parametrize("name, content, message", [
    ("manifest.json", None, "manifest field target.graph: None"),
    ("manifest.json", b"\xff\xfe{}", "manifest.json: not readable JSON"),
    ("tokenizer.json", b"\xff\xfe{}", "tokenizer.json: not a readable tokenizer.json"),
    ("tokenizer.json", b"{}", "tokenizer.json: not a readable tokenizer.json"),
])
def test_the_command_line_names_a_broken_artifact_in_one_line(artifact, tmp_path, capsys, name,
                                                              content, message):
    import shutil

    from cellspec import cli

    copy = shutil.copytree(artifact, tmp_path / "copy")
    if content is None:  # target.graph: null
        data = json.loads((copy / name).read_text())
        data["target"]["graph"] = None
        content = json.dumps(data).encode()
    (copy / name).write_bytes(content)
    assert cli.main(["generate", "hi", "--model", str(copy), "--max-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cellspec: error: ") and message in err, err
