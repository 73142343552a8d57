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
    """Sequences' cells in pools filled with noise, cells handed out in random order; every
    cell_table is padded with noise cells the mask hides: the graph must read only the cells
    of each row's own sequence, in position order."""

    def __init__(self, manifest: Manifest, rng: np.random.Generator) -> None:
        self.manifest, self.rng = manifest, rng
        dtype = numpy_dtype(manifest.model.dtype)
        self.pools = {}
        for i, layer in enumerate(manifest.target_cache):
            shape = (manifest.max_cells, layer.kv_heads * layer.head_dim)
            for name in (artifact.k_pool(i), artifact.v_pool(i)):
                self.pools[name] = rng.standard_normal(shape).astype(dtype)
        self.free = list(rng.permutation(np.arange(1, manifest.max_cells)))  # 0 = scratch
        self.cells: dict[int, list[int]] = {}

    def mask(self, lengths: list[int], counts: list[int], width: int, num_cells: int,
             window: int) -> np.ndarray:
        """[S, 1, Q, N + Q]: key position k visible from query position q iff k <= q (and
        q - k < window), k < the row's frontier for read cells; padding sees itself."""
        mask = np.zeros((len(lengths), 1, width, num_cells + width), dtype=bool)
        for s, (length, count) in enumerate(zip(lengths, counts)):
            for q in range(width):
                if q >= count:
                    mask[s, 0, q, num_cells + q] = True
                    continue
                keys = [(j, j) for j in range(length)]
                keys += [(num_cells + u, length + u) for u in range(q + 1)]
                for column, k in keys:
                    mask[s, 0, q, column] = not window or length + q - k < window
        return mask

    def feeds(self, rows: list[tuple[int, list[int]]], noise: int = 3) -> dict[str, np.ndarray]:
        lengths = [len(self.cells.setdefault(seq, [])) for seq, _ in rows]
        counts = [len(tokens) for _, tokens in rows]
        width, num_cells = max(counts), max(lengths) + noise
        tokens = np.zeros((len(rows), width), np.int64)
        positions = np.zeros((len(rows), width), np.int64)
        table = self.rng.integers(0, self.manifest.max_cells, (len(rows), num_cells))
        for s, (seq, ids) in enumerate(rows):
            tokens[s, : len(ids)] = ids
            positions[s, : len(ids)] = np.arange(lengths[s], lengths[s] + len(ids))
            table[s, : lengths[s]] = self.cells[seq]
        feeds = {artifact.TOKENS: tokens, artifact.POSITIONS: positions,
                 artifact.CELL_TABLE: table,
                 artifact.ATTN_MASK: self.mask(lengths, counts, width, num_cells, 0),
                 artifact.LOGITS_ROWS: np.array([s * width + q for s in range(len(rows))
                                                 for q in range(counts[s])], np.int64)}
        if self.manifest.window:
            feeds[artifact.ATTN_MASK_WINDOW] = self.mask(lengths, counts, width, num_cells,
                                                         self.manifest.window)
        return {**feeds, **self.pools}

    def commit(self, outputs: dict[str, np.ndarray], rows: list[tuple[int, list[int]]]) -> None:
        for s, (seq, ids) in enumerate(rows):
            cells = [int(self.free.pop()) for _ in ids]
            for i in range(len(self.manifest.target_cache)):
                self.pools[artifact.k_pool(i)][cells] = outputs[artifact.k_new(i)][s, : len(ids)]
                self.pools[artifact.v_pool(i)][cells] = outputs[artifact.v_new(i)][s, : len(ids)]
            self.cells[seq] += cells


def run_steps(folder: Path, sequences: list[list[int]], seed: int = 0) -> list[np.ndarray]:
    """Each sequence's prompt, then one-token decode steps, every sequence a row of the same
    steps; returns each sequence's logits at every position."""
    manifest = Manifest.load(folder)
    session = ort.InferenceSession(str(folder / manifest.target.graph),
                                   providers=["CPUExecutionProvider"])
    output_names = [o.name for o in session.get_outputs()]
    cache = NumpyCache(manifest, np.random.default_rng(seed))
    logits: list[list[np.ndarray]] = [[] for _ in sequences]
    steps = [[(k, seq[:PROMPT_LEN]) for k, seq in enumerate(sequences)]]
    steps += [[(k, [seq[p]]) for k, seq in enumerate(sequences)]
              for p in range(PROMPT_LEN, len(sequences[0]))]
    for rows in steps:
        feeds = cache.feeds(rows)
        outputs = dict(zip(output_names, session.run(None, feeds), strict=True))
        cache.commit(outputs, rows)
        offset = 0
        for k, (_, ids) in enumerate(rows):
            logits[k].append(outputs[artifact.LOGITS][offset: offset + len(ids)])
            offset += len(ids)
    return [np.concatenate(rows) for rows in logits]


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
    # two sequences as two rows of every step: each must read only its own cells
    sequences = np.random.default_rng(1).integers(0, 256, (2, PROMPT_LEN + DECODE_STEPS))
    for got, sequence in zip(run_steps(tmp_path / "artifact", sequences.tolist()), sequences):
        want = reference_logits(model, sequence.tolist())
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
    assert artifact.ATTN_MASK_WINDOW in names


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
    (taps,) = session.run([artifact.TAPS], cache.feeds([(0, sequence)]))
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
    [got] = run_steps(tmp_path / "artifact", [sequence])
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
