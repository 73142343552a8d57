"""Shared fixtures: tiny seeded Hugging Face checkpoints (torch and transformers import lazily)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# name -> (config class, config kwargs). Tiny: hidden 64, vocab 256, 2-3 layers.
TINY_BASE: dict[str, Any] = dict(vocab_size=256, hidden_size=64, intermediate_size=96,
                                 num_attention_heads=4, max_position_embeddings=128,
                                 rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
LLAMA3_ROPE = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=64)
TINY_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama_gqa": ("LlamaConfig", dict(num_hidden_layers=2, num_key_value_heads=2)),
    "llama_tied_llama3": ("LlamaConfig", dict(
        num_hidden_layers=2, num_key_value_heads=1, tie_word_embeddings=True,
        rope_parameters=LLAMA3_ROPE, eos_token_id=[2, 3])),
    "llama_bias": ("LlamaConfig", dict(num_hidden_layers=2, num_key_value_heads=4,
                                       attention_bias=True, mlp_bias=True)),
    "qwen3_gqa": ("Qwen3Config", dict(num_hidden_layers=2, num_key_value_heads=2, head_dim=32,
                                      rope_parameters=dict(rope_type="default",
                                                           rope_theta=1000000.0))),
    "qwen3_tied": ("Qwen3Config", dict(num_hidden_layers=2, num_key_value_heads=2, head_dim=16,
                                       tie_word_embeddings=True)),
    "qwen3_window": ("Qwen3Config", dict(num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                                         use_sliding_window=True, sliding_window=4,
                                         max_window_layers=1)),
    "mistral_window": ("MistralConfig", dict(num_hidden_layers=2, num_key_value_heads=2,
                                             sliding_window=5)),
}


def make_tiny_model(name: str, seed: int = 0) -> Any:
    """A seeded tiny HF causal LM in float32 eval mode with eager attention. Weights are redrawn
    larger than HF's init (std 0.02) and norm weights moved off 1, so attention and norms matter."""
    import torch
    import transformers

    class_name, kwargs = TINY_MODELS[name]
    config = getattr(transformers, class_name)(**{**TINY_BASE, **kwargs})
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if "norm" in param_name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.copy_(0.15 * torch.randn_like(param))
    return model.float().eval()


@pytest.fixture
def tiny_checkpoint(tmp_path: Path) -> Callable[[str], tuple[Path, Any]]:
    """tiny_checkpoint(name) -> (folder holding config.json + model.safetensors, the HF model)."""

    def build(name: str) -> tuple[Path, Any]:
        model = make_tiny_model(name)
        folder = tmp_path / f"hf_{name}"
        model.save_pretrained(folder)
        return folder, model

    return build


def export_dflash(root: Path, **config) -> Path:
    """A tiny random Qwen3 target with a random 2-layer DFlash draft (block 5, taps 0 and 1),
    exported under `root` with ExportConfig(**config): its artifact folder."""
    from cellspec.export import ExportConfig, export
    from tests.reference.zlab_draft import write_random_draft

    target = make_tiny_model("qwen3_gqa")
    target.save_pretrained(root / "target")
    draft = write_random_draft(root / "draft", hidden=64, vocab=256, num_target_layers=2,
                               taps=[0, 1], block_size=5, mask_token_id=255, num_layers=2)
    out = root / "artifact"
    export(root / "target", out, ExportConfig(**config), progress=False, draft=draft)
    return out


def draft_calls(stats: dict, prefix: str = "", suffix: str = "") -> int:
    """The runs a model's `stats` (method name -> MethodStats) count for the methods named
    `prefix`... `suffix` (e.g. the draft's blocks queued " past verdict")."""
    return sum(s.calls for name, s in stats.items()
               if name.startswith(prefix) and name.endswith(suffix))


@pytest.fixture(scope="session")
def dflash_artifact(tmp_path_factory):
    """export_dflash's artifact in float32."""
    return export_dflash(tmp_path_factory.mktemp("dflash"), static_widths=(1, 2, 4, 8),
                         dynamic_width=32, max_context=128, max_cells=512)


# Fixtures that export or load the bundled SmolLM2-135M: a test using one is slow, marked or not.
BUNDLED_MODEL_FIXTURES = {"smollm2_gguf", "smollm2_artifact", "smollm2_hf",
                          "smollm2_dflash_artifact", "gguf_path"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if BUNDLED_MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def smollm2_gguf():
    """The bundled SmolLM2-135M-Instruct GGUF (skipped with the reason when not installed)."""
    from cellspec.errors import InvalidCheckpoint
    from cellspec.export.gguf import find_bundled_gguf

    try:
        return find_bundled_gguf()
    except InvalidCheckpoint as error:
        pytest.skip(str(error))
