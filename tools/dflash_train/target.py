"""The frozen target in torch: cellspec's checkpoint readers, a transformers Llama, its taps.

The target is read by cellspec (`load_checkpoint`: a `.gguf` file or a HF folder), so it is the
model cellspec runs: float32 tensors by HF name, tied embeddings without `lm_head.weight`.
A tap of layer i is the output of decoder layer i (HF `output_hidden_states[i + 1]`), recorded
with forward hooks so the final norm never touches it.

transformers renamed the cache keyword (`past_key_values` -> `cache`, 5.2x); `CACHE_KEYWORD`
is whichever the installed version takes (the GPU machine runs 5.17, this one 5.24).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]


def import_cellspec_export() -> None:
    """cellspec/export/__init__.py imports onnx, absent on the GPU machine; the readers used here
    (checkpoint, gguf, gguf_tokenizer, draft_checkpoint, arch) do not. Without onnx, register the
    package bare so its submodules import without running its __init__."""
    if "cellspec.export" in sys.modules or importlib.util.find_spec("onnx") is not None:
        return
    import cellspec

    package = types.ModuleType("cellspec.export")
    package.__path__ = [str(Path(cellspec.__file__).parent / "export")]
    sys.modules["cellspec.export"] = package


def load_target_checkpoint(path: str | Path | None) -> Any:
    """cellspec's Checkpoint of `path` (a .gguf file or a HF folder); None = the bundled
    SmolLM2-135M-Instruct GGUF."""
    import_cellspec_export()
    from cellspec.export.checkpoint import load_checkpoint
    from cellspec.export.gguf import find_bundled_gguf

    return load_checkpoint(find_bundled_gguf() if path is None else Path(path))


def cache_keyword() -> str:
    names = inspect.signature(LlamaForCausalLM.forward).parameters
    return "cache" if "cache" in names else "past_key_values"


CACHE_KEYWORD = cache_keyword()


def build_target(ckpt: Any, device: str | torch.device, dtype: torch.dtype = torch.float32,
                 num_layers: int | None = None) -> LlamaForCausalLM:
    """The frozen target in eval mode; with `num_layers`, only its first layers (enough for taps
    of layers < num_layers; the LM head is then never used). Built on the meta device and
    assigned the checkpoint's tensors, so no random init is spent on 135M parameters."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = dict(ckpt.config)
    config["num_hidden_layers"] = num_layers or config["num_hidden_layers"]
    hf_config = LlamaConfig(**config)
    hf_config._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = LlamaForCausalLM(hf_config)
    tied = "lm_head.weight" not in ckpt.tensors
    state = {name: _tensor(ckpt, "model.embed_tokens.weight" if tied and name == "lm_head.weight"
                           else name, dtype)
             for name in model.state_dict()}
    model.load_state_dict(state, assign=True)
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.model.rotary_emb = LlamaRotaryEmbedding(config=hf_config)  # its buffers were meta
    return model.to(device).eval().requires_grad_(False)


def _tensor(ckpt: Any, name: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.from_numpy(ckpt.tensors[name]).to(dtype)


@contextmanager
def recording_taps(model: LlamaForCausalLM, tap_layer_ids: tuple[int, ...]):
    """Within the block, every forward appends the outputs of the tapped decoder layers to the
    yielded list, in tap order: [batch, seq, hidden] each."""
    outputs: dict[int, torch.Tensor] = {}

    def hook(index: int):
        def record(_module, _inputs, output):
            outputs[index] = output[0] if isinstance(output, tuple) else output
        return record

    handles = [model.model.layers[i].register_forward_hook(hook(i)) for i in tap_layer_ids]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def target_taps(model: LlamaForCausalLM, ids: torch.Tensor,
                tap_layer_ids: tuple[int, ...]) -> torch.Tensor:
    """ids [N, S] (right-padded: causal attention keeps padding out of real rows) -> taps
    [N, S, n_taps * hidden], the tapped layers' outputs concatenated in tap order (z-lab's fc
    input). Runs the decoder only: with a truncated target, no layer past the last tap."""
    return target_taps_and_final(model, ids, tap_layer_ids)[0]


@torch.no_grad()
def target_taps_and_final(model: LlamaForCausalLM, ids: torch.Tensor,
                          tap_layer_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(taps as target_taps gives them, the decoder's output after the final norm [N, S, H]:
    what the LM head reads, meaningful only for an untruncated target)."""
    with recording_taps(model, tap_layer_ids) as outputs:
        final = model.model(input_ids=ids, use_cache=False).last_hidden_state
    return torch.cat([outputs[i] for i in tap_layer_ids], dim=-1), final


def chat_tokenizer(ckpt: Any) -> Any:
    """cellspec's Tokenizer of the checkpoint: `encode(prompt, chat=True)` is the exact prompt
    `cellspec generate` feeds the target (chat template, system prompt and all)."""
    from tokenizers import Tokenizer as HfTokenizer

    from cellspec.tokenizer import Tokenizer

    if ckpt.tokenizer_json is None or not ckpt.chat_template:
        raise SystemExit("the target checkpoint has no tokenizer.json or no chat template")
    eos = ckpt.config.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [] if eos is None else [eos]
    return Tokenizer(HfTokenizer.from_str(ckpt.tokenizer_json), ckpt.config.get("bos_token_id"),
                     eos_ids, ckpt.chat_template)
