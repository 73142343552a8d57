"""The exported target graph, driven through a numpy cell cache, matches transformers' logits."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from safetensors.numpy import load_file, save_file

from cellspec import artifact
from cellspec.artifact import Manifest
from cellspec.errors import InvalidArgument, InvalidCheckpoint
from cellspec.export import TARGET_GRAPH, ExportConfig, export
from cellspec.export.weights import numpy_dtype

PROMPT_LEN, DECODE_STEPS = 7, 20
CONFIG = ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=16, max_cells=64)


class NumpyCache:
    """One session's cells in pools filled with noise: the graph must read only cells_read."""

    def __init__(self, manifest: Manifest, rng: np.random.Generator) -> None:
        self.manifest, self.rng = manifest, rng
        dtype = numpy_dtype(manifest.model.dtype)
        self.pools = {}
        for i, layer in enumerate(manifest.target_cache):
            shape = (manifest.max_cells, layer.kv_heads, layer.head_dim)
            for name in (artifact.k_pool(i), artifact.v_pool(i)):
                self.pools[name] = rng.standard_normal(shape).astype(dtype)
        self.free = list(rng.permutation(np.arange(1, manifest.max_cells)))  # 0 = scratch
        self.cell_pos: dict[int, int] = {}

    def bias(self, read: np.ndarray, positions: np.ndarray, window: int) -> np.ndarray:
        """[T, N + T]: 0 where key position k is visible from query q, -inf elsewhere."""
        keys = np.concatenate([[self.cell_pos[c] for c in read], positions]).astype(np.int64)
        q, k = positions[:, None], keys[None, :]
        visible = (k <= q) & ((q - k < window) if window else True)
        return np.where(visible, 0.0, -np.inf).astype(np.float32)

    def feeds(self, tokens: list[int], start: int) -> dict[str, np.ndarray]:
        positions = np.arange(start, start + len(tokens), dtype=np.int64)
        read = np.array(list(self.cell_pos), dtype=np.int64)
        self.rng.shuffle(read)
        feeds = {artifact.TOKENS: np.array([tokens], dtype=np.int64),
                 artifact.POSITIONS: positions,
                 artifact.LOGITS_ROWS: np.arange(len(tokens), dtype=np.int64),
                 artifact.CELLS_READ: read,
                 artifact.ATTN_BIAS: self.bias(read, positions, 0)}
        if self.manifest.window:
            feeds[artifact.ATTN_BIAS_WINDOW] = self.bias(read, positions, self.manifest.window)
        return {**feeds, **self.pools}

    def commit(self, outputs: dict[str, np.ndarray], positions: np.ndarray) -> None:
        cells = [int(self.free.pop()) for _ in positions]
        for i in range(len(self.manifest.target_cache)):
            self.pools[artifact.k_pool(i)][cells] = outputs[artifact.k_new(i)]
            self.pools[artifact.v_pool(i)][cells] = outputs[artifact.v_new(i)]
        self.cell_pos.update(zip(cells, positions.tolist(), strict=True))


def run_steps(folder: Path, sequence: list[int], seed: int = 0) -> np.ndarray:
    """Prompt step then one-token decode steps; returns the logits of every position."""
    manifest = Manifest.load(folder)
    session = ort.InferenceSession(str(folder / manifest.target.graph),
                                   providers=["CPUExecutionProvider"])
    output_names = [o.name for o in session.get_outputs()]
    cache = NumpyCache(manifest, np.random.default_rng(seed))
    steps = [(0, sequence[:PROMPT_LEN])]
    steps += [(p, [sequence[p]]) for p in range(PROMPT_LEN, len(sequence))]
    logits = []
    for start, tokens in steps:
        feeds = cache.feeds(tokens, start)
        outputs = dict(zip(output_names, session.run(None, feeds), strict=True))
        cache.commit(outputs, feeds[artifact.POSITIONS])
        logits.append(outputs[artifact.LOGITS])
    return np.concatenate(logits)


def reference_logits(model, sequence: list[int]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([sequence])).logits[0].float().numpy()


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name", ["llama_gqa", "llama_tied_llama3", "llama_bias", "qwen3_gqa",
                                  "qwen3_tied", "qwen3_window", "mistral_window"])
def test_logits_match_transformers(tiny_checkpoint, tmp_path, name):
    folder, model = tiny_checkpoint(name)
    manifest = export(folder, tmp_path / "artifact", CONFIG, progress=False)
    graph = tmp_path / "artifact" / TARGET_GRAPH
    onnx.checker.check_model(str(graph), full_check=True)
    sequence = np.random.default_rng(1).integers(0, 256, PROMPT_LEN + DECODE_STEPS).tolist()
    got = run_steps(tmp_path / "artifact", sequence)
    want = reference_logits(model, sequence)
    assert got.shape == want.shape == (len(sequence), 256)
    assert relative_error(got, want) < 1e-4
    assert Manifest.load(tmp_path / "artifact") == manifest


def test_window_and_manifest(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("qwen3_window")
    manifest = export(folder, tmp_path / "artifact", CONFIG, progress=False)
    assert [c.window for c in manifest.target_cache] == [0, 4, 4]
    assert manifest.model.architecture == "qwen3"
    assert manifest.max_cells == 64 and manifest.max_context == 128
    names = {i.name for i in onnx.load(str(tmp_path / "artifact" / TARGET_GRAPH)).graph.input}
    assert artifact.ATTN_BIAS_WINDOW in names


def test_tied_embedding_stored_once(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama_tied_llama3")
    manifest = export(folder, tmp_path / "artifact", CONFIG, progress=False)
    assert manifest.model.eos_token_ids == (2, 3)
    assert manifest.model.rope_scaling["rope_type"] == "llama3"
    graph = onnx.load(str(tmp_path / "artifact" / TARGET_GRAPH), load_external_data=False)
    gemm = next(n for n in graph.graph.node if n.op_type == "Gemm")
    gather = next(n for n in graph.graph.node if n.name == "/embed_tokens/Gather")
    assert gemm.input[1] == gather.input[0] == "model.embed_tokens.weight"
    external = [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert len({t.name for t in external}) == len(external)


def test_taps_are_layer_outputs(tiny_checkpoint, tmp_path):
    import torch

    folder, model = tiny_checkpoint("qwen3_gqa")
    export(folder, tmp_path / "a", ExportConfig(max_cells=64, dynamic_width=0, taps=(1, 0)),
           progress=False)
    cache = NumpyCache(Manifest.load(tmp_path / "a"), np.random.default_rng(0))
    session = ort.InferenceSession(str(tmp_path / "a" / TARGET_GRAPH))
    sequence = list(range(3, 12))
    (taps,) = session.run([artifact.TAPS], cache.feeds(sequence, 0))
    layer_outputs = {}
    for i, layer in enumerate(model.model.layers):  # HF's last hidden_states entry is normed
        layer.register_forward_hook(lambda _m, _a, out, i=i: layer_outputs.update({i: out}))
    with torch.no_grad():
        model(input_ids=torch.tensor([sequence]))
    want = torch.cat([layer_outputs[1], layer_outputs[0]], dim=-1).numpy()
    assert taps.shape == (1, len(sequence), 128)
    assert relative_error(taps, want) < 1e-4


def test_float16_runs_on_cpu(tiny_checkpoint, tmp_path):
    folder, model = tiny_checkpoint("qwen3_window")
    config = ExportConfig(dtype="float16", max_cells=64, dynamic_width=0)
    export(folder, tmp_path / "artifact", config, progress=False)
    onnx.checker.check_model(str(tmp_path / "artifact" / TARGET_GRAPH), full_check=True)
    sequence = np.random.default_rng(1).integers(0, 256, PROMPT_LEN + DECODE_STEPS).tolist()
    got = run_steps(tmp_path / "artifact", sequence)
    assert got.dtype == np.float32
    assert relative_error(got, reference_logits(model, sequence)) < 2e-2


def _rewrite(folder: Path, change) -> None:
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_missing_tensor(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama_gqa")
    _rewrite(folder, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(InvalidCheckpoint, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        export(folder, tmp_path / "artifact", CONFIG, progress=False)
    assert not (tmp_path / "artifact").exists()


def test_bad_shape(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("qwen3_gqa")
    name = "model.layers.0.self_attn.k_norm.weight"
    _rewrite(folder, lambda t: t.update({name: np.ones(7, np.float32)}))
    with pytest.raises(InvalidCheckpoint, match=rf"{name}: shape \(7,\), expected \(32,\)"):
        export(folder, tmp_path / "artifact", CONFIG, progress=False)


def test_unknown_architecture(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama_gqa")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(InvalidCheckpoint, match="GPT2LMHeadModel"):
        export(folder, tmp_path / "artifact", CONFIG, progress=False)


def test_out_folder_not_empty(tiny_checkpoint, tmp_path):
    folder, _ = tiny_checkpoint("llama_gqa")
    out = tmp_path / "artifact"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(InvalidArgument, match="not empty"):
        export(folder, out, CONFIG, progress=False)
    with pytest.raises(InvalidArgument, match="not a cellspec artifact"):
        export(folder, out, CONFIG, progress=False, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    export(folder, out, CONFIG, progress=False)
    export(folder, out, CONFIG, progress=False, overwrite=True)


def test_missing_checkpoint_files(tmp_path):
    with pytest.raises(InvalidCheckpoint, match="config.json"):
        export(tmp_path, tmp_path / "artifact", CONFIG, progress=False)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(dtype="int8"), "dtype"), (dict(static_widths=(4, 2)), "static_widths"),
    (dict(dynamic_width=16, static_widths=(1, 16)), "dynamic_width"),
    (dict(max_cells=256), "max_cells"), (dict(taps=(1, 1)), "taps"),
    (dict(max_context=0), "max_context")])
def test_export_config_refuses(kwargs, fragment):
    with pytest.raises(InvalidArgument, match=fragment):
        ExportConfig(**kwargs)
