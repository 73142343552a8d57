"""The artifact's manifest: the one module that export/ and runtime/ both import.

An artifact is a folder: `manifest.json`, one `.onnx` file per graph, one external-data file of
weights shared by every graph, the tokenizer, and optionally TensorRT engines. The manifest records
everything the runtime must not guess; `Manifest.load` refuses a manifest it cannot trust with an
`InvalidArtifact` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cellspec.errors import InvalidArtifact
from cellspec.manifest_fields import (
    arguments,
    check,
    check_file,
    check_int,
    check_ints,
    check_list,
    check_token,
    is_number,
    list_of,
    make,
    no_constant,
    short,
)

FORMAT_VERSION = 4  # 2: per-sequence attention (cell tables), fused ops, 4-bit weights;
# 3: draft_block reads out only the proposal rows (proposal_rows); 4: TOP_K 4 -> 8
MANIFEST_NAME = "manifest.json"
WEIGHTS_NAME = "weights.bin"
TOKENIZER_NAME = "tokenizer.json"
DTYPES = ("float32", "float16", "bfloat16")
MIN_BLOCK_SIZE = 3  # a draft block holds an anchor and at least two proposals

# Graph input and output names (docs/design.md, "Graph ABI"); the runtime binds by these names
# only. A step is a rectangle: S rows (one sequence each) of Q tokens, each row reading N cells.
TOKENS = "tokens"  # int64 [S, Q]
POSITIONS = "positions"  # int64 [S, Q]
CELL_TABLE = "cell_table"  # int64 [S, N], row s: the cell of each position of its sequence
ATTN_MASK = "attn_mask"  # bool [S, 1, Q, N + Q], True where [cell_table[s] ; row s] is visible
ATTN_MASK_WINDOW = "attn_mask_window"  # as attn_mask, for sliding-window layers
LOGITS_ROWS = "logits_rows"  # int64 [R], indices into the S * Q tokens, row-major
LOGITS = "logits"  # float32 [R, V]
GREEDY = "greedy"  # int64 [R], the argmax of each logits row
TAPS = "taps"  # [S, Q, n_taps * hidden]
HIDDEN = "hidden"  # draft_context input: [S, Q, n_taps * hidden]
PROPOSAL_ROWS = "proposal_rows"  # draft_block input: int64 [P], the block positions read out
PROPOSALS = "proposals"  # draft_block output: int64 [O * P], each row read out's argmax
TOP_IDS = "top_ids"  # draft_block output: int64 [O * P, TOP_K], each row's best ids, best first
TOP_K = 8  # the choices of each block row draft_block gives (a tree's branches at most)
TOP_LOGP = "top_logp"  # draft_block output: float32 [O * P, TOP_K], their log-probabilities
PARAMS = "params"  # sample: [R, 4]; verify: [O, 3 + W] float32
CANDIDATES = "candidates"  # verify inputs: [O, W] int64, anchor then proposals
VERDICT = "verdict"  # verify output: [O, 2] int64, (accepted count, next token)


QUANTIZATIONS = ("none", "int4")


def k_pool(layer: int) -> str:
    """Input: layer's key pool, [max_cells, kv_heads * head_dim], read only."""
    return f"k_pool.{layer}"


def v_pool(layer: int) -> str:
    return f"v_pool.{layer}"


def k_new(layer: int) -> str:
    """Output: the step's rotated keys for one layer, [S, Q, kv_heads * head_dim]."""
    return f"k_new.{layer}"


def v_new(layer: int) -> str:
    return f"v_new.{layer}"


@dataclass(frozen=True)
class LayerCache:
    """One attention layer's cache geometry; window 0 = full attention."""

    kv_heads: int
    head_dim: int
    window: int = 0

    @property
    def row_width(self) -> int:
        """Values per cell of one pool: kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    def check(self, name: str) -> None:
        check_int(self.kv_heads, f"{name}.kv_heads", 1)
        check_int(self.head_dim, f"{name}.head_dim", 1)
        check_int(self.window, f"{name}.window", 0)


@dataclass(frozen=True)
class ModelInfo:
    architecture: str  # registry key, e.g. "llama", "qwen3"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    dtype: str  # "float32" | "float16" | "bfloat16": weights and activations
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]
    tokenizer: str | None  # file name inside the artifact
    chat_template: str | None
    name: str = ""

    def __post_init__(self) -> None:
        check(isinstance(self.architecture, str), "model.architecture",
              f"{short(self.architecture)}, expected a string")
        for key in ("vocab_size", "hidden_size", "num_layers", "num_heads"):
            check_int(getattr(self, key), f"model.{key}", 1)
        check(self.dtype in DTYPES, "model.dtype",
              f"{short(self.dtype)}, expected one of {', '.join(DTYPES)}")
        check(is_number(self.rope_theta) and self.rope_theta > 0, "model.rope_theta",
              f"{short(self.rope_theta)}, expected a number > 0")
        check(self.rope_scaling is None or isinstance(self.rope_scaling, dict),
              "model.rope_scaling", f"{short(self.rope_scaling)}, expected null or an object")
        if self.bos_token_id is not None:
            check_token(self.bos_token_id, "model.bos_token_id", self.vocab_size)
        check(isinstance(self.eos_token_ids, tuple), "model.eos_token_ids",
              f"{short(self.eos_token_ids)}, expected a list of token ids")
        for token in self.eos_token_ids:
            check_token(token, "model.eos_token_ids", self.vocab_size)
        if self.tokenizer is not None:
            check_file(self.tokenizer, "model.tokenizer")
        check(self.chat_template is None or isinstance(self.chat_template, str),
              "model.chat_template", f"{short(self.chat_template)}, expected null or a string")
        check(isinstance(self.name, str), "model.name", f"{short(self.name)}, expected a string")


@dataclass(frozen=True)
class TargetMethod:
    """The target graph and the shapes it is run at. A piece [S, Q] is static (a backend may
    capture it) when Q fits a static width and S a batch bucket; any other piece runs at its
    own shape, Q at most max(static_widths[-1], dynamic_width)."""

    graph: str
    static_widths: tuple[int, ...]  # Q of static pieces: 1 (decode), verify widths
    dynamic_width: int  # bound on Q of the other pieces (prompt chunks); 0 = static only
    tap_layer_ids: tuple[int, ...] = ()
    batch_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # S of static pieces
    quantization: str = "none"  # "none" | "int4" (MatMulNBits weights)

    def __post_init__(self) -> None:
        check_file(self.graph, "target.graph")
        check_ints(self.static_widths, "target.static_widths", 1)
        check_int(self.dynamic_width, "target.dynamic_width", 0)
        check_ints(self.tap_layer_ids, "target.tap_layer_ids", 0)
        check_ints(self.batch_buckets, "target.batch_buckets", 1)
        check(isinstance(self.quantization, str), "target.quantization",
              f"{short(self.quantization)}, expected a string")


@dataclass(frozen=True)
class DraftMethod:
    context_graph: str
    block_graph: str
    block_size: int
    tap_layer_ids: tuple[int, ...]
    mask_token_id: int
    max_owners: int
    num_layers: int
    proposal_vocab_size: int = 0  # > 0: draft_block's logits cover that many proposable ids

    def __post_init__(self) -> None:
        check_file(self.context_graph, "draft.context_graph")
        check_file(self.block_graph, "draft.block_graph")
        check_int(self.block_size, "draft.block_size", MIN_BLOCK_SIZE)
        check_ints(self.tap_layer_ids, "draft.tap_layer_ids", 0)
        check_int(self.mask_token_id, "draft.mask_token_id", 0)
        check_int(self.max_owners, "draft.max_owners", 1)
        check_int(self.num_layers, "draft.num_layers", 1)
        check_int(self.proposal_vocab_size, "draft.proposal_vocab_size", 0)


@dataclass(frozen=True)
class Engine:
    """One TensorRT engine built from `graph`, profiles in the order they were added."""

    graph: str
    path: str
    compute_capability: str
    profiles: tuple[dict[str, Any], ...]

    def check(self, name: str) -> None:
        check_file(self.graph, f"{name}.graph")
        check_file(self.path, f"{name}.path")
        check(isinstance(self.compute_capability, str), f"{name}.compute_capability",
              f"{short(self.compute_capability)}, expected a string")
        is_list = isinstance(self.profiles, tuple)
        check(is_list and all(isinstance(p, dict) for p in self.profiles), f"{name}.profiles",
              f"{short(self.profiles)}, expected a list of objects")


@dataclass(frozen=True)
class Manifest:
    model: ModelInfo
    target_cache: tuple[LayerCache, ...]
    max_cells: int  # one of them is the scratch cell, never handed out
    max_context: int
    target: TargetMethod
    draft_cache: tuple[LayerCache, ...] = ()
    draft: DraftMethod | None = None
    graphs: dict[str, str] = field(default_factory=dict)  # sampler/verifier: name -> file
    engines: tuple[Engine, ...] = ()
    weights: str = WEIGHTS_NAME
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_int(self.format_version, "format_version", 0)
        check(self.format_version == FORMAT_VERSION, "format_version",
              f"{self.format_version}, this cellspec reads version {FORMAT_VERSION}")
        for name, kind in (("model", ModelInfo), ("target", TargetMethod)):
            check(isinstance(getattr(self, name), kind), name, "expected an object")
        check_int(self.max_cells, "max_cells", 2)  # one is the scratch cell
        check_int(self.max_context, "max_context", 1)
        self._check_target()
        self._check_draft()
        check(isinstance(self.graphs, dict), "graphs", f"{short(self.graphs)}, expected an object")
        for name, graph in self.graphs.items():
            check_file(graph, f"graphs.{name}")
        check_list(self.engines, "engines", Engine)
        for index, engine in enumerate(self.engines):
            engine.check(f"engines[{index}]")
        check_file(self.weights, "weights")

    def _check_target(self) -> None:
        _check_caches(self.target_cache, "target_cache", self.model.num_layers, "the model")
        widths = self.target.static_widths
        is_ascending = list(widths) == sorted(set(widths))
        check(len(widths) > 0 and is_ascending, "target.static_widths",
              f"{list(widths)}, need ascending positive widths")
        check(self.target.dynamic_width == 0 or self.target.dynamic_width > widths[-1],
              "target.dynamic_width",
              f"{self.target.dynamic_width}, must be 0 or wider than {widths[-1]}")
        buckets = self.target.batch_buckets
        check(len(buckets) > 0 and list(buckets) == sorted(set(buckets)), "target.batch_buckets",
              f"{list(buckets)}, need ascending positive sizes")
        check(self.target.quantization in QUANTIZATIONS, "target.quantization",
              f"{self.target.quantization!r}, expected one of {', '.join(QUANTIZATIONS)}")
        check(self.max_step_width < self.max_cells, "max_cells",
              f"{self.max_cells} cells cannot hold a {self.max_step_width}-token step")
        windows = {c.window for c in self.target_cache if c.window > 0}
        check(len(windows) <= 1, "target_cache", f"windows {sorted(windows)}, at most one size")
        for layer in self.target.tap_layer_ids:
            check(layer < self.model.num_layers, "target.tap_layer_ids",
                  f"layer {layer} outside 0..{self.model.num_layers - 1}")

    def _check_draft(self) -> None:
        draft = self.draft
        if draft is None:
            _check_caches(self.draft_cache, "draft_cache", 0, "an artifact without a draft")
            return
        check(isinstance(draft, DraftMethod), "draft", "expected null or an object")
        _check_caches(self.draft_cache, "draft_cache", draft.num_layers, "draft.num_layers")
        vocab = self.model.vocab_size
        check(draft.mask_token_id < vocab, "draft.mask_token_id",
              f"{draft.mask_token_id}, expected a token id in 0..{vocab - 1}")
        check(draft.proposal_vocab_size <= vocab, "draft.proposal_vocab_size",
              f"{draft.proposal_vocab_size}, the vocabulary has {vocab} tokens")
        check(draft.tap_layer_ids == self.target.tap_layer_ids, "draft.tap_layer_ids",
              f"{list(draft.tap_layer_ids)}, the target returns the taps of layers "
              f"{list(self.target.tap_layer_ids)}")

    @property
    def max_step_width(self) -> int:
        return max(self.target.static_widths[-1], self.target.dynamic_width)

    @property
    def window(self) -> int:
        """The sliding-window size of the windowed layers, 0 when every layer is full."""
        return max((c.window for c in self.target_cache), default=0)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def save(self, folder: Path) -> None:
        (Path(folder) / MANIFEST_NAME).write_text(self.to_json())

    @classmethod
    def from_dict(cls, data: Any) -> Manifest:
        """The manifest of a `manifest.json` object; refuses any field it cannot trust."""
        check(isinstance(data, dict), "manifest", f"{short(data)}, expected a JSON object")
        version = data.get("format_version")
        check(version == FORMAT_VERSION, "format_version", f"{short(version)}, this cellspec "
              f"reads version {FORMAT_VERSION}: export the model again")
        top = arguments(cls, data, "manifest")
        draft = top.get("draft")
        top.update(
            model=make(ModelInfo, top["model"], "model", ("eos_token_ids",)),
            target_cache=make_caches(top["target_cache"], "target_cache"),
            target=make(TargetMethod, top["target"], "target",
                        ("static_widths", "tap_layer_ids", "batch_buckets")),
            draft=None if draft is None else make(DraftMethod, draft, "draft",
                                                  ("tap_layer_ids",)),
            draft_cache=make_caches(top.get("draft_cache", []), "draft_cache"),
            engines=tuple(make(Engine, e, f"engines[{i}]", ("profiles",))
                          for i, e in enumerate(list_of(top.get("engines", []), "engines"))),
        )
        return cls(**top)

    @classmethod
    def load(cls, folder: str | Path) -> Manifest:
        path = Path(folder) / MANIFEST_NAME
        if not path.is_file():
            raise InvalidArtifact(f"{folder}: no {MANIFEST_NAME} (is this a cellspec artifact?)")
        try:
            data = json.loads(path.read_bytes().decode("utf-8"), parse_constant=no_constant)
        except (OSError, ValueError, RecursionError) as error:  # UnicodeDecodeError included
            raise InvalidArtifact(f"{path}: not readable JSON ({short(error)})") from error
        if not isinstance(data, dict):
            raise InvalidArtifact(f"{path}: expected a JSON object")
        return cls.from_dict(data)


def _check_caches(caches: Any, name: str, num_layers: int, owner: str) -> None:
    check_list(caches, name, LayerCache)
    for index, cache in enumerate(caches):
        cache.check(f"{name}[{index}]")
    check(len(caches) == num_layers, name, f"{len(caches)} layers, {owner} has {num_layers}")


def make_caches(data: Any, name: str) -> tuple[LayerCache, ...]:
    return tuple(make(LayerCache, c, f"{name}[{i}]") for i, c in enumerate(list_of(data, name)))
