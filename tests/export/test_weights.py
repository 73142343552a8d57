"""WeightStore writes each tensor once, aligned; checkpoints load from sharded folders."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cellspec import artifact
from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export import ExportConfig, export, load_checkpoint
from cellspec.export.weights import ALIGNMENT, WeightStore


def _read(folder, ref: TensorProto) -> np.ndarray:
    tensor = TensorProto()
    tensor.CopyFrom(ref)
    onnx.external_data_helper.load_external_data_for_tensor(tensor, str(folder))
    return numpy_helper.to_array(tensor)


def test_each_name_written_once_and_aligned(tmp_path):
    a = np.arange(5, dtype=np.float32)
    b = np.ones((3, 7), np.float16)
    with WeightStore(tmp_path) as store:
        ref_a = store.add("a", a)
        ref_b = store.add("b", b)
        assert store.add("a", a) is ref_a
        with pytest.raises(InvalidArgument, match="weight a"):
            store.add("a", np.zeros(6, np.float32))
    offsets = {e.key: e.value for e in ref_b.external_data}
    assert int(offsets["offset"]) % ALIGNMENT == 0
    assert (tmp_path / artifact.WEIGHTS_NAME).stat().st_size == int(offsets["offset"]) + b.nbytes
    np.testing.assert_array_equal(_read(tmp_path, ref_a), a)
    np.testing.assert_array_equal(_read(tmp_path, ref_b), b)


def test_append_reuses_tensors_of_saved_graphs(tmp_path):
    with WeightStore(tmp_path) as store:
        ref = store.add("table", np.arange(12, dtype=np.float32).reshape(3, 4))
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, [2])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph([helper.make_node("Gather", ["table", "rows"], ["out"])], "g",
                              [rows], [out], initializer=[ref])
    onnx.save(helper.make_model(graph), str(tmp_path / "first.onnx"))
    size = (tmp_path / artifact.WEIGHTS_NAME).stat().st_size
    with WeightStore(tmp_path, append=True) as store:
        assert "table" in store
        assert store.add("table", np.zeros((3, 4), np.float32)).external_data == ref.external_data
        extra = store.add("extra", np.ones(2, np.float32))
    assert (tmp_path / artifact.WEIGHTS_NAME).stat().st_size > size
    np.testing.assert_array_equal(_read(tmp_path, extra), np.ones(2, np.float32))
    np.testing.assert_array_equal(_read(tmp_path, ref), np.arange(12).reshape(3, 4))


def test_sharded_checkpoint_with_tokenizer(tiny_checkpoint, tmp_path):
    from tokenizers import Tokenizer, models

    folder, model = tiny_checkpoint("qwen3_gqa")
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>")).save(
        str(sharded / "tokenizer.json"))
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    (sharded / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    ckpt = load_checkpoint(sharded)
    single = load_checkpoint(folder)
    assert sorted(ckpt.tensors) == sorted(single.tensors)
    for name in single.tensors:
        np.testing.assert_array_equal(ckpt.tensors[name], single.tensors[name])
    manifest = export(sharded, tmp_path / "artifact", ExportConfig(max_cells=64, dynamic_width=0),
                      progress=False)
    assert manifest.model.tokenizer == artifact.TOKENIZER_NAME
    assert manifest.model.chat_template == template
    assert Tokenizer.from_file(str(tmp_path / "artifact" / artifact.TOKENIZER_NAME))


def test_missing_shard_and_gguf(tiny_checkpoint, tmp_path):
    _, model = tiny_checkpoint("llama_gqa")
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="100KB")
    shard = sorted(sharded.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(InvalidCheckpoint, match=shard.name):
        load_checkpoint(sharded)
    with pytest.raises(InvalidCheckpoint, match="missing.gguf"):
        load_checkpoint(tmp_path / "missing.gguf")
