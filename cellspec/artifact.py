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

FORMAT_VERSION = 2  # 2: per-sequence attention (cell tables), fused ops, 4-bit weights
MANIFEST_NAME = "manifest.json"
WEIGHTS_NAME = "weights.bin"
TOKENIZER_NAME = "tokenizer.json"

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
PROPOSALS = "proposals"  # draft_block output: int64 [O, block], the argmax of every row
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


@dataclass(frozen=True)
class DraftMethod:
    context_graph: str
    block_graph: str
    block_size: int
    tap_layer_ids: tuple[int, ...]
    mask_token_id: int
    max_owners: int
    num_layers: int


@dataclass(frozen=True)
class Engine:
    """One TensorRT engine built from `graph`, profiles in the order they were added."""

    graph: str
    path: str
    compute_capability: str
    profiles: tuple[dict[str, Any], ...]


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
        _check(self.format_version == FORMAT_VERSION, "format_version",
               f"{self.format_version}, this cellspec reads version {FORMAT_VERSION}")
        _check(self.max_cells > 1, "max_cells", f"{self.max_cells}, need > 1 (a scratch cell)")
        _check(self.max_context > 0, "max_context", f"{self.max_context}, need > 0")
        _check(len(self.target_cache) == self.model.num_layers, "target_cache",
               f"{len(self.target_cache)} layers, the model has {self.model.num_layers}")
        widths = self.target.static_widths
        is_ascending = list(widths) == sorted(set(widths))
        _check(len(widths) > 0 and widths[0] > 0 and is_ascending, "target.static_widths",
               f"{list(widths)}, need ascending positive widths")
        _check(self.target.dynamic_width == 0 or self.target.dynamic_width > widths[-1],
               "target.dynamic_width",
               f"{self.target.dynamic_width}, must be 0 or wider than {widths[-1]}")
        buckets = self.target.batch_buckets
        _check(len(buckets) > 0 and buckets[0] > 0 and list(buckets) == sorted(set(buckets)),
               "target.batch_buckets", f"{list(buckets)}, need ascending positive sizes")
        _check(self.target.quantization in QUANTIZATIONS, "target.quantization",
               f"{self.target.quantization!r}, expected one of {', '.join(QUANTIZATIONS)}")
        _check(self.max_step_width < self.max_cells, "max_cells",
               f"{self.max_cells} cells cannot hold a {self.max_step_width}-token step")
        windows = {c.window for c in self.target_cache if c.window > 0}
        _check(len(windows) <= 1, "target_cache", f"windows {sorted(windows)}, at most one size")
        for layer in self.target.tap_layer_ids:
            _check(0 <= layer < self.model.num_layers, "target.tap_layer_ids",
                   f"layer {layer} outside 0..{self.model.num_layers - 1}")

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
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise InvalidArtifact(f"manifest field format_version: {version!r}, this cellspec "
                                  f"reads version {FORMAT_VERSION}; export the model again")
        try:
            model = dict(data["model"])
            model["eos_token_ids"] = tuple(model["eos_token_ids"])
            draft = data.get("draft")
            return cls(
                model=ModelInfo(**model),
                target_cache=tuple(LayerCache(**c) for c in data["target_cache"]),
                max_cells=int(data["max_cells"]),
                max_context=int(data["max_context"]),
                target=_target_method(data["target"]),
                draft_cache=tuple(LayerCache(**c) for c in data.get("draft_cache", ())),
                draft=None if draft is None else _draft_method(draft),
                graphs=dict(data.get("graphs", {})),
                engines=tuple(_engine(e) for e in data.get("engines", ())),
                weights=data.get("weights", WEIGHTS_NAME),
                format_version=int(data["format_version"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArtifact(f"manifest: missing or malformed field {error}") from error

    @classmethod
    def load(cls, folder: str | Path) -> Manifest:
        path = Path(folder) / MANIFEST_NAME
        if not path.is_file():
            raise InvalidArtifact(f"{folder}: no {MANIFEST_NAME} (is this a cellspec artifact?)")
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise InvalidArtifact(f"{path}: not readable JSON ({error})") from error
        if not isinstance(data, dict):
            raise InvalidArtifact(f"{path}: expected a JSON object")
        return cls.from_dict(data)


def _target_method(data: dict[str, Any]) -> TargetMethod:
    return TargetMethod(
        graph=data["graph"],
        static_widths=tuple(int(w) for w in data["static_widths"]),
        dynamic_width=int(data["dynamic_width"]),
        tap_layer_ids=tuple(int(i) for i in data.get("tap_layer_ids", ())),
        batch_buckets=tuple(int(b) for b in data["batch_buckets"]),
        quantization=str(data["quantization"]),
    )


def _draft_method(data: dict[str, Any]) -> DraftMethod:
    data = dict(data)
    data["tap_layer_ids"] = tuple(int(i) for i in data["tap_layer_ids"])
    return DraftMethod(**data)


def _engine(data: dict[str, Any]) -> Engine:
    data = dict(data)
    data["profiles"] = tuple(data["profiles"])
    return Engine(**data)


def _check(ok: bool, name: str, detail: str) -> None:
    if not ok:
        raise InvalidArtifact(f"manifest field {name}: {detail}")
