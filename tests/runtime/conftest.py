"""A tiny random Llama exported once per test session, and an executor factory over it."""

import pytest

from cellspec.export import ExportConfig, export
from cellspec.runtime.executor import Executor


def save_tiny_llama(folder, seed=0, **overrides):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    config.update(overrides)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory):
    checkpoint = save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    out = tmp_path_factory.mktemp("tiny-artifact") / "artifact"
    export(checkpoint, out, ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=16,
                                         max_context=256, max_cells=512), progress=False)
    return out


@pytest.fixture
def make_executor(tiny_artifact):
    def make(**kwargs):
        kwargs.setdefault("max_sessions", 8)
        return Executor.load(tiny_artifact, **kwargs)

    return make
