"""A Hugging Face `tokenizer.json` rebuilt from a GGUF file's `tokenizer.ggml.*` metadata.

A GGUF carries no tokenizer.json: the vocabulary, merges, token types and special ids are metadata
under llama.cpp's key names. Only byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is rebuilt.
How text is split before BPE is named by `tokenizer.ggml.pre`; each supported name maps to the
`tokenizers` pre-tokenizer that splits text the way llama.cpp's regex list for it does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from cellspec.errors import InvalidCheckpoint

# llama.cpp's `llama_token_type` values (tokenizer.ggml.token_type).
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
ADDED_TOKEN_TYPES = (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)


def _gpt2_split() -> pre_tokenizers.PreTokenizer:
    # llama.cpp: the GPT-2 regex alone.
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2_split() -> pre_tokenizers.PreTokenizer:
    # llama.cpp's smollm/starcoder/refact list: `\p{N}` isolated first, then the GPT-2 regex on
    # every piece. Identical to SmolLM2's own tokenizer.json: Digits(individual) + ByteLevel(regex).
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    "default": _gpt2_split,
    "gpt-2": _gpt2_split,
    "gpt2": _gpt2_split,
    "smollm": _digits_then_gpt2_split,
    "starcoder": _digits_then_gpt2_split,
    "refact": _digits_then_gpt2_split,
}


@cache
def _byte_spelling() -> dict[int, str]:
    """GPT-2's byte -> printable character map: the alphabet of byte-level vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    spelling = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in spelling:
            spelling[byte] = chr(256 + extra)
            extra += 1
    return spelling


def _vocab(tokens: Sequence[str], token_types: Sequence[int]) -> dict[str, int]:
    """token -> id. A BPE token not written in the byte alphabet is respelled into it; an added
    (control or user-defined) token keeps its spelling, since it is matched whole in the text."""
    spelling = _byte_spelling()
    alphabet = set(spelling.values())
    vocab: dict[str, int] = {}
    for token_id, (token, token_type) in enumerate(zip(tokens, token_types)):
        if token_type not in ADDED_TOKEN_TYPES and not set(token) <= alphabet:
            token = "".join(spelling[byte] for byte in token.encode("utf-8"))
        vocab.setdefault(token, token_id)
    return vocab


def _merges(merges: Sequence[str]) -> list[tuple[str, str]]:
    pairs = []
    for rank, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise InvalidCheckpoint(f"tokenizer.ggml.merges[{rank}] = {merge!r}: expected 'a b'")
        pairs.append((parts[0], parts[1]))
    return pairs


def _added_tokens(
    tokens: Sequence[str], token_types: Sequence[int], token_type: int
) -> list[AddedToken]:
    """The tokens of one type as added tokens, matched whole before BPE sees the text."""
    special = token_type == TOKEN_TYPE_CONTROL
    return [
        AddedToken(token, special=special, normalized=False)
        for token, this_type in zip(tokens, token_types)
        if this_type == token_type
    ]


def _require(metadata: Mapping[str, Any], key: str) -> Any:
    if key not in metadata:
        raise InvalidCheckpoint(f"GGUF metadata has no {key!r}; cannot build the tokenizer")
    return metadata[key]


def _post_processor(metadata: Mapping[str, Any], tokens: Sequence[str]) -> Any:
    """Prepend BOS when `tokenizer.ggml.add_bos_token` says so, as llama.cpp does."""
    byte_level = processors.ByteLevel(trim_offsets=False)
    bos_id = metadata.get("tokenizer.ggml.bos_token_id")
    if not metadata.get("tokenizer.ggml.add_bos_token", False) or bos_id is None:
        return byte_level
    bos = tokens[bos_id]
    template = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 $B:1", special_tokens=[(bos, bos_id)]
    )
    return processors.Sequence([byte_level, template])


def make_tokenizer_json(metadata: Mapping[str, Any]) -> str:
    """The tokenizer.json text for the byte-level BPE tokenizer the metadata describes.

    `metadata` maps GGUF keys (`tokenizer.ggml.tokens`, ...) to their decoded values.
    """
    model_type = _require(metadata, "tokenizer.ggml.model")
    if model_type != "gpt2":
        raise InvalidCheckpoint(f"tokenizer.ggml.model = {model_type!r}: only 'gpt2' is supported")
    pre_type = metadata.get("tokenizer.ggml.pre", "default")
    if pre_type not in PRE_TOKENIZERS:
        raise InvalidCheckpoint(
            f"tokenizer.ggml.pre = {pre_type!r}: expected one of {sorted(PRE_TOKENIZERS)}"
        )
    tokens = list(_require(metadata, "tokenizer.ggml.tokens"))
    token_types = list(metadata.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    if len(token_types) != len(tokens):
        raise InvalidCheckpoint(
            f"tokenizer.ggml.token_type has {len(token_types)} entries for {len(tokens)} tokens"
        )
    merges = _merges(_require(metadata, "tokenizer.ggml.merges"))
    tokenizer = Tokenizer(models.BPE(vocab=_vocab(tokens, token_types), merges=merges))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre_type]()
    tokenizer.post_processor = _post_processor(metadata, tokens)
    tokenizer.decoder = decoders.ByteLevel()
    # Control tokens (<|im_start|>) are special: skipped by decode(skip_special_tokens=True).
    tokenizer.add_special_tokens(_added_tokens(tokens, token_types, TOKEN_TYPE_CONTROL))
    tokenizer.add_tokens(_added_tokens(tokens, token_types, TOKEN_TYPE_USER_DEFINED))
    return tokenizer.to_str()
