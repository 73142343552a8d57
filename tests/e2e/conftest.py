"""The bundled SmolLM2-135M-Instruct: exported once per test session, and its transformers twin
loaded from the same GGUF by transformers' own reader (an independent dequantizer)."""

import pytest

from cellspec.export import ExportConfig, export


@pytest.fixture(scope="session")
def smollm2_artifact(smollm2_gguf, tmp_path_factory):
    out = tmp_path_factory.mktemp("smollm2") / "artifact"
    export(smollm2_gguf, out, ExportConfig(max_context=1024, max_cells=2048), progress=False)
    return out


@pytest.fixture(scope="session")
def smollm2_hf(smollm2_gguf):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(2)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32,
        attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="session")
def smollm2_dflash_artifact(smollm2_gguf, tmp_path_factory):
    """SmolLM2 with a random-weight one-layer DFlash draft (taps 1, 15, 28; block 4)."""
    from tests.reference.zlab_draft import write_random_draft

    root = tmp_path_factory.mktemp("smollm2-dflash")
    draft = write_random_draft(root / "draft", hidden=576, vocab=49152, num_target_layers=30,
                               taps=[1, 15, 28], block_size=4, mask_token_id=0, heads=9,
                               kv_heads=3, head_dim=64, intermediate=1536, scale=0.02)
    out = root / "artifact"
    export(smollm2_gguf, out, ExportConfig(max_context=512, max_cells=2048), progress=False,
           draft=draft)
    return out
