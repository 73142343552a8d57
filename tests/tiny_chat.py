"""A tiny random Llama with a real tokenizer and chat template, exported once per test session.

The tokenizer is a byte-level BPE trained on a few sentences (multi-byte characters included, so
decoding can stop inside a UTF-8 character) with ChatML special tokens; its post-processor adds
BOS, and the chat template writes BOS itself, so a duplicated BOS would show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

BOS, EOS, IM_START, IM_END = "<s>", "</s>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [BOS, EOS, IM_START, IM_END]  # ids 0, 1, 2, 3
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, what is the capital of France? Paris is.",
    "naïve café crème brûlée, über straße, 日本語のテキスト, emoji 🙂🚀",
]


def make_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)])
    return tokenizer


def save_checkpoint(folder: Path, seed: int = 0, layers: int = 2, tied: bool = False,
                    scale: float = 0.15) -> Path:
    """config.json + model.safetensors + tokenizer.json + chat_template.jinja in `folder`: a
    Llama of hidden 64 with `layers` layers, weights N(0, scale) and norms N(1, 0.2)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = make_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, tie_word_embeddings=tied, bos_token_id=0,
        eos_token_id=[1, 3])
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # larger than HF's init, so the next token is rarely a near tie
        for name, param in model.named_parameters():
            param.copy_(1.0 + 0.2 * torch.randn_like(param) if "norm" in name
                        else scale * torch.randn_like(param))
    model.save_pretrained(folder)
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return folder


def tiny_chat_artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The exported artifact, built on first call in this test session."""
    from cellspec.export import ExportConfig, export

    root = tmp_path_factory.getbasetemp() / "tiny-chat"
    out = root / "artifact"
    if not (out / "manifest.json").is_file():
        checkpoint = save_checkpoint(root / "checkpoint")
        export(checkpoint, out, ExportConfig(static_widths=(1, 2, 4, 8), dynamic_width=32,
                                             max_context=256, max_cells=1024), progress=False)
    return out
