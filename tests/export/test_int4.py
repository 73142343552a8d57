"""4-bit artifacts: the GGUF's Q4_1/Q8_0 blocks go into the graph as they are (no dequantized
copy), a float-arithmetic int4 artifact computes what the float32 one computes, and a DFlash
draft borrows the quantized embedding and LM head."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from cellspec.export import ExportConfig, export
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import BatchInput, Sampling
from tests.reference.zlab_draft import write_random_draft


def step_logits(artifact, tokens: list[int]) -> np.ndarray:
    """The logits of every position of one prompt, through the runtime."""
    executor = Executor.load(artifact, max_sessions=1)
    sid = executor.open_session()
    seq = np.full(len(tokens), sid, np.int64)
    return executor.target.forward(seq, np.asarray(tokens, np.int64), np.arange(len(tokens))).logits


def initializers(folder, names: list[str]) -> dict[str, np.ndarray]:
    model = onnx.load(str(folder / "target.onnx"))  # the external data read back from weights.bin
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer
             if t.name in names}
    return found


@pytest.mark.slow
def test_gguf_blocks_go_in_as_they_are(smollm2_gguf, tmp_path):
    """The artifact holds the GGUF's own blocks (bit for bit what gguf-py dequantizes), no
    float copy of any projection, and a float-arithmetic int4 artifact's logits equal the
    float32 artifact's to rounding."""
    from cellspec.export.gguf import load_gguf
    from cellspec.export.quant import BlockQuantized

    config = dict(max_context=256, max_cells=512)
    exact = export(smollm2_gguf, tmp_path / "int4", ExportConfig(quantize="int4",
                                                                accuracy_level=0, **config),
                   progress=False)
    assert exact.target.quantization == "int4"
    model = onnx.load(str(tmp_path / "int4" / "target.onnx"), load_external_data=False)
    float_weights = [t.name for t in model.graph.initializer if t.name.endswith(".T")]
    assert float_weights == []  # every projection is blocks
    prefix = "model.layers.3.mlp.down_proj.weight"
    arrays = initializers(tmp_path / "int4", [f"{prefix}.{k}" for k in
                                              ("qweight", "scales", "zero_points", "offsets")])
    gguf = load_gguf(smollm2_gguf).tensors
    want = gguf["model.layers.3.mlp.down_proj.weight"]
    blocks = gguf.blocks("model.layers.3.mlp.down_proj.weight")
    got = BlockQuantized(4, 32, want.shape, arrays[f"{prefix}.qweight"],
                         arrays[f"{prefix}.scales"], blocks.zero_points,
                         arrays[f"{prefix}.offsets"].T.copy())
    assert np.array_equal(got.dequantize().view(np.uint32), want.view(np.uint32))
    export(smollm2_gguf, tmp_path / "f32", ExportConfig(**config), progress=False)
    prompt = [1, 9690, 314, 260, 3575, 282, 4649, 47]
    f32, q4 = step_logits(tmp_path / "f32", prompt), step_logits(tmp_path / "int4", prompt)
    assert np.abs(q4 - f32).max() / np.abs(f32).max() < 1e-4


def test_round_to_nearest_int4_with_a_draft(tiny_checkpoint, tmp_path):
    """A safetensors checkpoint quantized by round-to-nearest has no float projection left, and
    speculation on an int4 artifact (the draft borrowing the 8-bit embedding and LM head) gives
    exactly the tokens plain decoding gives, at accuracy level 4 too (int8 activations): every
    4-bit row rounds the same in a verify and in a plain step, since steps never leave a row
    alone in a tile and ort-cpu runs a draft's target with its attention by position."""
    folder, _ = tiny_checkpoint("qwen3_gqa")
    draft = write_random_draft(tmp_path / "draft", hidden=64, vocab=256, num_target_layers=2,
                               taps=[0, 1], block_size=5, mask_token_id=255, num_layers=1)
    config = dict(static_widths=(1, 2, 4, 8), dynamic_width=32, max_context=128, max_cells=512)
    export(folder, tmp_path / "int4", ExportConfig(quantize="int4", **config), progress=False,
           draft=draft)
    model = onnx.load(str(tmp_path / "int4" / "target.onnx"), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    assert {"MatMulNBits", "GatherBlockQuantized"} <= ops and "Gemm" not in ops
    assert not [t.name for t in model.graph.initializer if t.name.endswith(".T")]
    prompt = list(range(5, 30))
    tokens = {}
    for name, executor in (("plain", Executor.load(tmp_path / "int4", max_sessions=1)),
                           ("spec", DFlashExecutor.load(tmp_path / "int4", max_sessions=1,
                                                        n_draft=3))):
        sid = executor.open_session()
        executor.set_sampling(sid, Sampling(temperature=0.8, top_p=0.9), seed=4)
        produced = list(executor.execute([BatchInput(sid, tuple(prompt), 0)])[0].tokens)
        while len(produced) < 20:
            out = executor.execute([BatchInput(sid, (produced[-1],), executor.pos(sid))])[0]
            produced += out.tokens
        tokens[name] = produced[:20]
    assert tokens["spec"] == tokens["plain"]
