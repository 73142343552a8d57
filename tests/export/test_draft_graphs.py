"""The DFlash draft graphs on ORT CPU against the torch reference (tests/reference/dflash_ref.py).

A tiny z-lab-layout draft (hidden 64, 2 layers, block 4, taps of a 4-layer target, vocab 256) is
written to disk, exported with the target's embedding and LM head in the shared WeightStore, then
`draft_context` fills a numpy cell pool and `draft_block` reads it, for one owner and for two
owners packed into one call.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

torch = pytest.importorskip("torch")

from safetensors.numpy import save_file  # noqa: E402 (after the torch skip)

from cellspec import artifact  # noqa: E402
from cellspec.errors import InvalidCheckpoint  # noqa: E402
from cellspec.export.arch import read_hparams  # noqa: E402
from cellspec.export.draft import BLOCK_GRAPH, CONTEXT_GRAPH, export_draft  # noqa: E402
from cellspec.export.graph import Linear  # noqa: E402
from cellspec.export.quant import BlockQuantized, from_gguf_tensor, quantize_rtn  # noqa: E402
from cellspec.export.quant_graph import initializers, quant_linear  # noqa: E402
from cellspec.export.target import EMBED_WEIGHT, LM_HEAD_WEIGHT, Embeddings  # noqa: E402
from cellspec.export.weights import WeightStore  # noqa: E402
from tests.reference.dflash_ref import DFlashDraftRef, draft_logits, make_config  # noqa: E402

VOCAB, HIDDEN, MAX_CELLS, MASK = 256, 64, 48, 255
TARGET_CONFIG: dict[str, Any] = dict(
    architectures=["Qwen3ForCausalLM"], vocab_size=VOCAB, hidden_size=HIDDEN,
    intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    num_hidden_layers=4, rms_norm_eps=1e-6, max_position_embeddings=128)
DRAFT_CONFIG: dict[str, Any] = dict(
    architectures=["DFlashDraftModel"], vocab_size=VOCAB, hidden_size=HIDDEN,
    intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    num_hidden_layers=2, rms_norm_eps=1e-6, max_position_embeddings=128, hidden_act="silu",
    rope_parameters=dict(rope_type="default", rope_theta=10000.0), block_size=4,
    num_target_layers=4, dflash_config=dict(mask_token_id=MASK, target_layer_ids=[1, 2]))
NUM_TAPS = 2


def make_reference(seed: int = 0) -> DFlashDraftRef:
    """The reference draft with weights redrawn off HF's init so norms and attention matter."""
    torch.manual_seed(seed)
    model = DFlashDraftRef(make_config(DRAFT_CONFIG), NUM_TAPS)
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 0.2 if "norm" in name else 0.15
            param.copy_((1.0 if "norm" in name else 0.0) + scale * torch.randn_like(param))
    return model.float().eval()


def write_draft(folder: Path, config: dict[str, Any], tensors: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def reference_tensors(model: DFlashDraftRef, prefix: str = "") -> dict[str, np.ndarray]:
    return {prefix + k: v.numpy().copy() for k, v in model.state_dict().items()
            if "rotary" not in k}


def export_to(folder: Path, config: dict[str, Any], tensors: dict[str, np.ndarray],
              target_config: dict[str, Any] | None = None,
              target_weights: tuple[np.ndarray, np.ndarray] | None = None,
              proposal_vocab: str | None = None, quantized_head: BlockQuantized | None = None):
    """Write the draft (and the text of its proposal_vocab.json, if given), export it next to a
    stand-in target (embedding + LM head in the store; the head as blocks if quantized_head)."""
    draft_dir = write_draft(folder / "draft", config, tensors)
    if proposal_vocab is not None:
        (draft_dir / "proposal_vocab.json").write_text(proposal_vocab)
    out = folder / "artifact"
    out.mkdir()
    target = read_hparams(target_config or TARGET_CONFIG)
    embed, head = target_weights or (np.zeros((VOCAB, HIDDEN), np.float32),) * 2
    with WeightStore(out) as store:
        store.add(EMBED_WEIGHT, embed)
        head_weight: Linear = LM_HEAD_WEIGHT
        if quantized_head is None:
            store.add(LM_HEAD_WEIGHT, head)
        else:
            for name, array in initializers(quantized_head, "target.lm_head").items():
                store.add(name, array)
            head_weight = quant_linear(quantized_head, "target.lm_head")
        method, geometry = export_draft(draft_dir, target,
                                        Embeddings(EMBED_WEIGHT, head_weight), store, out,
                                        max_cells=MAX_CELLS, max_context=64)
    return out, method, geometry


class Draft:
    """The exported draft on ORT CPU with numpy cell pools [MAX_CELLS, KV * D]."""

    def __init__(self, out: Path, num_layers: int, kv_heads: int, head_dim: int) -> None:
        def session(name: str) -> ort.InferenceSession:
            return ort.InferenceSession(str(out / name), providers=["CPUExecutionProvider"])

        self.context, self.block = session(CONTEXT_GRAPH), session(BLOCK_GRAPH)
        self.num_layers = num_layers
        shape = (MAX_CELLS, kv_heads * head_dim)
        self.k_pool = [np.zeros(shape, np.float32) for _ in range(num_layers)]
        self.v_pool = [np.zeros(shape, np.float32) for _ in range(num_layers)]

    def commit(self, taps: np.ndarray, positions: np.ndarray, cells: np.ndarray) -> None:
        """taps [C, W] at positions [C], as one row of a draft_context step."""
        names = [o.name for o in self.context.get_outputs()]
        outputs = dict(zip(names, self.context.run(None, {
            artifact.HIDDEN: taps[None], artifact.POSITIONS: positions[None]}), strict=True))
        for i in range(self.num_layers):
            self.k_pool[i][cells] = outputs[artifact.k_new(i)][0]
            self.v_pool[i][cells] = outputs[artifact.v_new(i)][0]

    def run_block(self, tokens: np.ndarray, table: np.ndarray, lengths: list[int],
                  num_visible: list[int], rows: list[int] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Blocks tokens [O, B] at positions lengths[o].., each seeing the first
        num_visible[o] cells of its cell_table row [O, N] and its whole block; the logits and
        proposals of block rows `rows` (default: every row)."""
        owners, block = tokens.shape
        positions = np.array([np.arange(n, n + block) for n in lengths])
        mask = np.zeros((owners, 1, block, table.shape[1] + block), dtype=bool)
        for o, visible in enumerate(num_visible):
            mask[o, 0, :, :visible] = True
            mask[o, 0, :, table.shape[1]:] = True
        feeds = {artifact.TOKENS: tokens, artifact.POSITIONS: positions,
                 artifact.CELL_TABLE: table, artifact.ATTN_MASK: mask,
                 artifact.PROPOSAL_ROWS: np.array(range(block) if rows is None else rows,
                                                  dtype=np.int64)}
        for i in range(self.num_layers):
            feeds[artifact.k_pool(i)], feeds[artifact.v_pool(i)] = self.k_pool[i], self.v_pool[i]
        self.feeds = feeds  # the last block's, for its other outputs
        return tuple(self.block.run([artifact.LOGITS, artifact.PROPOSALS], feeds))


@pytest.fixture
def setup(tmp_path):
    rng = np.random.default_rng(0)
    model = make_reference()
    embed = rng.normal(size=(VOCAB, HIDDEN)).astype(np.float32)
    head = (0.3 * rng.normal(size=(VOCAB, HIDDEN))).astype(np.float32)
    out, method, geometry = export_to(tmp_path, DRAFT_CONFIG, reference_tensors(model),
                                      target_weights=(embed, head))
    draft = Draft(out, method.num_layers, geometry[0].kv_heads, geometry[0].head_dim)
    return model, draft, embed, head, method, rng


def reference(model, embed, head, taps, tokens, positions) -> np.ndarray:
    t = torch.from_numpy
    return draft_logits(model, t(embed), t(head), t(taps), t(tokens), t(positions)).numpy()


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_method_and_geometry(setup):
    _, draft, _, _, method, _ = setup
    assert method == artifact.DraftMethod(CONTEXT_GRAPH, BLOCK_GRAPH, 4, (1, 2), MASK, 4, 2)
    assert [i.name for i in draft.context.get_inputs()] == [artifact.HIDDEN, artifact.POSITIONS]
    assert [o.name for o in draft.context.get_outputs()] == [
        "k_new.0", "v_new.0", "k_new.1", "v_new.1"]
    assert [i.name for i in draft.block.get_inputs()] == [
        "tokens", "positions", "cell_table", "attn_mask", "proposal_rows", "k_pool.0",
        "v_pool.0", "k_pool.1", "v_pool.1"]
    assert [o.name for o in draft.block.get_outputs()] == [
        artifact.LOGITS, artifact.PROPOSALS, artifact.TOP_IDS, artifact.TOP_LOGP]


def test_one_owner_matches_reference(setup):
    model, draft, embed, head, method, rng = setup
    context, block = 7, method.block_size
    taps = rng.normal(size=(context, NUM_TAPS * HIDDEN)).astype(np.float32)
    cells = rng.permutation(np.arange(1, MAX_CELLS))[:context + 3]
    draft.commit(taps, np.arange(context), cells[:context])
    # three more cells in the table that the block must not see (stale keys)
    draft.commit(rng.normal(size=(3, NUM_TAPS * HIDDEN)).astype(np.float32), np.arange(3),
                 cells[context:])
    tokens = np.array([[17, MASK, MASK, MASK]])
    logits, proposals = draft.run_block(tokens, cells[None], [context], [context])
    want = reference(model, embed, head, taps, tokens[0], np.arange(context + block))
    assert logits.shape == (block, VOCAB) and logits.dtype == np.float32
    assert rel_err(logits, want) < 1e-4
    assert proposals.tolist() == np.argmax(logits, axis=-1).tolist()


def test_two_owners_in_one_block_call(setup):
    """Owner a: 5 context rows drained in two draft_context calls; owner b: 9 rows in one. Each
    block reads only its owner's row of the cell table; a's row is padded with b's cells."""
    model, draft, embed, head, method, rng = setup
    block, sizes = method.block_size, (5, 9)
    taps = [rng.normal(size=(n, NUM_TAPS * HIDDEN)).astype(np.float32) for n in sizes]
    cells = rng.permutation(np.arange(1, MAX_CELLS))[:sum(sizes)]
    owned = [cells[:sizes[0]], cells[sizes[0]:]]
    draft.commit(taps[0][:3], np.arange(3), owned[0][:3])
    draft.commit(taps[0][3:], np.arange(3, 5), owned[0][3:])
    draft.commit(taps[1], np.arange(9), owned[1])
    table = np.stack([np.r_[owned[0], owned[1][:4]], owned[1]])
    tokens = np.array([[40, MASK, MASK, MASK], [MASK, MASK, MASK, MASK]])
    logits, _ = draft.run_block(tokens, table, list(sizes), list(sizes))
    for o, n in enumerate(sizes):
        want = reference(model, embed, head, taps[o], tokens[o], np.arange(n + block))
        assert rel_err(logits[o * block:(o + 1) * block], want) < 1e-4
    # the proposal rows only: every row still attends to the whole block, so the rows read out
    # are the reference's rows 1..2, and bit for bit those of the full read-out
    picked, proposals = draft.run_block(tokens, table, list(sizes), list(sizes), rows=[1, 2])
    assert picked.shape == (2 * len(sizes), VOCAB) and proposals.shape == (2 * len(sizes),)
    for o, n in enumerate(sizes):
        want = reference(model, embed, head, taps[o], tokens[o], np.arange(n + block))
        assert rel_err(picked[2 * o: 2 * o + 2], want[1:3]) < 1e-4
        assert np.array_equal(picked[2 * o: 2 * o + 2], logits[o * block + 1: o * block + 3])
        assert proposals[2 * o: 2 * o + 2].tolist() == np.argmax(want[1:3], axis=-1).tolist()


def test_a_proposal_vocab_restricts_the_head_to_its_ids(tmp_path):
    """With proposal_vocab.json, draft_block's logits are the reference's columns of those ids
    and each proposal is the id of their argmax: an id the full head would have proposed
    otherwise is replaced by the best proposable one."""
    rng = np.random.default_rng(1)
    model = make_reference()
    embed = rng.normal(size=(VOCAB, HIDDEN)).astype(np.float32)
    head = (0.3 * rng.normal(size=(VOCAB, HIDDEN))).astype(np.float32)
    ids = np.sort(rng.choice(VOCAB, size=40, replace=False))
    out, method, geometry = export_to(tmp_path, DRAFT_CONFIG, reference_tensors(model),
                                      target_weights=(embed, head),
                                      proposal_vocab=json.dumps({"token_ids": ids.tolist()}))
    assert method.proposal_vocab_size == 40
    draft = Draft(out, method.num_layers, geometry[0].kv_heads, geometry[0].head_dim)
    context, block = 6, method.block_size
    taps = rng.normal(size=(context, NUM_TAPS * HIDDEN)).astype(np.float32)
    cells = rng.permutation(np.arange(1, MAX_CELLS))[:context]
    draft.commit(taps, np.arange(context), cells)
    tokens = np.array([[17, MASK, MASK, MASK]])
    logits, proposals = draft.run_block(tokens, cells[None], [context], [context], rows=[1, 2, 3])
    want = reference(model, embed, head, taps, tokens[0], np.arange(context + block))[1:]
    assert logits.shape == (3, 40)
    assert rel_err(logits, want[:, ids]) < 1e-4
    assert proposals.tolist() == ids[np.argmax(want[:, ids], axis=-1)].tolist()
    full = np.argmax(want, axis=-1)
    assert not np.isin(full, ids).all()  # some row's best token is not proposable: replaced
    # a tree's material: each row's 4 best proposable ids and their log-softmax over those ids
    top_ids, top_logp = draft.block.run([artifact.TOP_IDS, artifact.TOP_LOGP], draft.feeds)
    columns = want[:, ids].astype(np.float64)
    best = np.argsort(-columns, axis=1, kind="stable")[:, : artifact.TOP_K]
    assert top_ids.tolist() == ids[best].tolist()
    log_softmax = columns - np.log(np.exp(columns).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(top_logp, np.take_along_axis(log_softmax, best, 1), atol=1e-4)


def q4_1_head(rng: np.random.Generator) -> BlockQuantized:
    """A [VOCAB, HIDDEN] head as GGUF Q4_1 blocks (float16 d and m, then 16 bytes of nibbles per
    32 weights), read as the export reads them: 4-bit codes with Q4_1's offsets."""
    blocks = HIDDEN // 32
    raw = np.zeros((VOCAB, blocks, 20), np.uint8)
    raw[..., :2] = rng.uniform(0.01, 0.05, (VOCAB, blocks)).astype(np.float16)[..., None].view(
        np.uint8)
    raw[..., 2:4] = rng.uniform(-0.4, -0.1, (VOCAB, blocks)).astype(np.float16)[..., None].view(
        np.uint8)
    raw[..., 4:] = rng.integers(0, 256, (VOCAB, blocks, 16))

    class Tensor:  # what from_gguf_tensor reads of a gguf.GGUFReader tensor
        tensor_type = type("T", (), {"name": "Q4_1"})()
        shape = (HIDDEN, VOCAB)
        data = raw.reshape(VOCAB, -1)

    quantized = from_gguf_tensor(Tensor())
    assert quantized is not None and quantized.offsets is not None
    return quantized


@pytest.mark.parametrize("kind", ["8-bit", "4-bit", "Q4_1"])
def test_a_proposal_vocab_narrows_a_block_quantized_head(tmp_path, kind):
    """With the target's head in blocks (as int4 exports have), the proposal head holds the
    blocks of the ids' rows: its logits are the whole head's logits at those ids, and each
    proposal is the id of their argmax. The three forms store their arrays differently (8-bit
    codes and zero points, 4-bit codes and packed zero points, Q4_1's offsets by column)."""
    rng = np.random.default_rng(3)
    model = make_reference()
    embed = rng.normal(size=(VOCAB, HIDDEN)).astype(np.float32)
    dense = (0.3 * rng.normal(size=(VOCAB, HIDDEN))).astype(np.float32)
    head = {"8-bit": lambda: quantize_rtn(dense, bits=8), "4-bit": lambda: quantize_rtn(dense),
            "Q4_1": lambda: q4_1_head(rng)}[kind]()
    ids = np.sort(rng.choice(VOCAB, size=40, replace=False))
    taps = rng.normal(size=(6, NUM_TAPS * HIDDEN)).astype(np.float32)
    cells = rng.permutation(np.arange(1, MAX_CELLS))[:6]
    tokens = np.array([[17, MASK, MASK, MASK]])
    results = {}
    for name, vocab in (("whole", None), ("narrow", json.dumps({"token_ids": ids.tolist()}))):
        (tmp_path / name).mkdir()
        out, method, geometry = export_to(tmp_path / name, DRAFT_CONFIG, reference_tensors(model),
                                          target_weights=(embed, dense), proposal_vocab=vocab,
                                          quantized_head=head)
        assert method.proposal_vocab_size == (0 if vocab is None else len(ids))
        draft = Draft(out, method.num_layers, geometry[0].kv_heads, geometry[0].head_dim)
        draft.commit(taps, np.arange(6), cells)
        results[name] = draft.run_block(tokens, cells[None], [6], [6], rows=[1, 2, 3])
    (whole, _), (narrow, proposals) = results["whole"], results["narrow"]
    assert whole.shape == (3, VOCAB) and narrow.shape == (3, len(ids))
    np.testing.assert_allclose(narrow, whole[:, ids], rtol=1e-6, atol=1e-6)
    assert proposals.tolist() == ids[np.argmax(narrow, axis=-1)].tolist()
    assert not np.isin(np.argmax(whole, axis=-1), ids).all()  # a whole-head best is replaced


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2", "not readable JSON"),
    ('{"token_ids": []}', "non-empty list of integers"),
    ('{"ids": [1, 2]}', "non-empty list of integers"),
    ('{"token_ids": [1, 2.5]}', "non-empty list of integers"),
    ('{"token_ids": [1, true]}', "non-empty list of integers"),
    ('{"token_ids": [3, 2]}', "ascending and distinct"),
    ('{"token_ids": [2, 2]}', "ascending and distinct"),
    ('{"token_ids": [-1, 2]}', "must lie in 0..255"),
    ('{"token_ids": [2, 256]}', "must lie in 0..255"),
])
def test_refuses_a_bad_proposal_vocab(tmp_path, text, message):
    with pytest.raises(InvalidCheckpoint, match=f"proposal_vocab.json: .*{message}"):
        export_to(tmp_path, DRAFT_CONFIG, reference_tensors(make_reference()),
                  proposal_vocab=text)


def test_zlab_layout_variants(tmp_path):
    """DFlash keys at the top level and a `model.` prefix on every tensor are accepted."""
    config = {k: v for k, v in DRAFT_CONFIG.items() if k != "dflash_config"}
    config.update(mask_token_id=3, target_layer_ids=[0, 3])
    _, method, geometry = export_to(tmp_path, config, reference_tensors(make_reference(), "model."))
    assert (method.mask_token_id, method.tap_layer_ids, method.block_size) == (3, (0, 3), 4)
    assert geometry == (artifact.LayerCache(2, 16, 0),) * 2


def _with(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(DRAFT_CONFIG)
    for key, value in changes.items():
        if key in ("mask_token_id", "target_layer_ids"):
            config["dflash_config"][key] = value
        else:
            config[key] = value
    return config


@pytest.mark.parametrize(("config", "field"), [
    (_with(architectures=["DFlash2DraftModel"]), "architectures"),
    (_with(hidden_size=32, head_dim=8), "hidden_size"),
    (_with(vocab_size=300), "vocab_size"),
    (_with(target_layer_ids=[1, 4]), "target_layer_ids"),
    (_with(target_layer_ids=[]), "target_layer_ids"),
    (_with(mask_token_id=VOCAB), "mask_token_id"),
    (_with(block_size=2), "block_size"),
    (_with(num_target_layers=6), "num_target_layers"),
    (_with(layer_types=["sliding_attention", "full_attention"]), "layer_types"),
    (_with(output_multiplier=0.5), "output_multiplier"),
    (_with(attention_bias=True), "attention_bias"),
])
def test_refuses_bad_config(tmp_path, config, field):
    with pytest.raises(InvalidCheckpoint, match=field):
        export_to(tmp_path, config, reference_tensors(make_reference()))


def test_refuses_missing_and_misshapen_tensors(tmp_path):
    tensors = reference_tensors(make_reference())
    missing = {k: v for k, v in tensors.items() if k != "layers.1.mlp.up_proj.weight"}
    with pytest.raises(InvalidCheckpoint, match=r"layers\.1\.mlp\.up_proj\.weight is missing"):
        export_to(tmp_path / "a", DRAFT_CONFIG, missing)
    misshapen = {**tensors, "hidden_norm.weight": np.ones(32, np.float32)}
    with pytest.raises(InvalidCheckpoint, match=r"hidden_norm\.weight: shape \(32,\)"):
        export_to(tmp_path / "b", DRAFT_CONFIG, misshapen)


def test_refuses_target_of_other_width(tmp_path):
    target = {**TARGET_CONFIG, "hidden_size": 128, "head_dim": 32}
    with pytest.raises(InvalidCheckpoint, match="hidden_size"):
        export_to(tmp_path, DRAFT_CONFIG, reference_tensors(make_reference()), target)
