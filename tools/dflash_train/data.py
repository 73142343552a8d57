"""Self-distillation data: prompt + response token ids of every generated sequence, one .npz.

Layout (np.savez_compressed), n sequences, T tokens in all:
  tokens        [T] uint16   every sequence's prompt then response ids, back to back
  offsets       [n + 1] int64  sequence i is tokens[offsets[i]:offsets[i + 1]]
  prompt_lens   [n] int32    its first prompt_lens[i] tokens are the chat-formatted prompt
  prompt_ids    [n] int32    index of its prompt in the prompt set
  sample_ids    [n] int16    0 = greedy, k >= 1 = the k-th sample at `temperature`
  category_ids  [n] uint8    index into `categories`
  is_finished   [n] bool     the response ends with an eos token (else max_new_tokens cut it)
  anchor_starts [n] int32    training anchors lie at or after this position: the prompt's end,
                             or, for an answer sampled up to a cut and greedy after it
                             (`generate --greedy-after`), the cut (absent in older files:
                             prompt_lens)
  meta          0-d str      JSON: categories, prompt set fingerprint, temperature, seed, ...
uint16 holds SmolLM2's 49152 ids; 2 bytes a token before compression, about 0.7 after.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MAX_VOCAB = 1 << 16  # uint16 ids
MAX_TOKENS = 10_000_000  # 20 MB of uint16; compressed about 0.7 byte a token (5.0M tokens of
# greedy-gen's data: 3.3 MB), so the file stays well under the 16 MB a GPU run brings back


@dataclass
class Sequences:
    tokens: np.ndarray
    offsets: np.ndarray
    prompt_lens: np.ndarray
    prompt_ids: np.ndarray
    sample_ids: np.ndarray
    category_ids: np.ndarray
    is_finished: np.ndarray
    anchor_starts: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompt_lens)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def sequence(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]: self.offsets[i + 1]]

    def done_jobs(self) -> set[tuple[int, int]]:
        """(prompt id, sample id) of every sequence held."""
        return set(zip(self.prompt_ids.tolist(), self.sample_ids.tolist()))

    def fingerprint(self) -> str:
        """Names the data in a checkpoint: count, tokens and a checksum of the ids."""
        checksum = int(np.bitwise_xor.reduce(self.tokens.astype(np.uint64) *
                                            np.arange(1, len(self.tokens) + 1, dtype=np.uint64)))
        return f"{len(self)}:{self.num_tokens}:{checksum:x}"


def empty(meta: dict[str, Any]) -> Sequences:
    return Sequences(np.zeros(0, np.uint16), np.zeros(1, np.int64), np.zeros(0, np.int32),
                     np.zeros(0, np.int32), np.zeros(0, np.int16), np.zeros(0, np.uint8),
                     np.zeros(0, bool), np.zeros(0, np.int32), meta)


def append(data: Sequences, sequences: list[np.ndarray], prompt_lens: list[int],
           prompt_ids: list[int], sample_ids: list[int], category_ids: list[int],
           is_finished: list[bool], anchor_starts: list[int] | None = None) -> Sequences:
    """A new Sequences with these sequences after the ones held (anchors from the prompt's end
    unless `anchor_starts` says otherwise)."""
    if not sequences:
        return data
    flat = np.concatenate(sequences)
    assert flat.min() >= 0 and flat.max() < MAX_VOCAB, (flat.min(), flat.max())
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    return Sequences(
        np.concatenate([data.tokens, flat.astype(np.uint16)]),
        np.concatenate([data.offsets, data.offsets[-1] + np.cumsum(lengths)]),
        np.concatenate([data.prompt_lens, np.asarray(prompt_lens, np.int32)]),
        np.concatenate([data.prompt_ids, np.asarray(prompt_ids, np.int32)]),
        np.concatenate([data.sample_ids, np.asarray(sample_ids, np.int16)]),
        np.concatenate([data.category_ids, np.asarray(category_ids, np.uint8)]),
        np.concatenate([data.is_finished, np.asarray(is_finished, bool)]),
        np.concatenate([data.anchor_starts, np.asarray(
            prompt_lens if anchor_starts is None else anchor_starts, np.int32)]), dict(data.meta))


def save(data: Sequences, path: Path) -> int:
    """Write atomically (a time limit may strike mid-write); returns the file's bytes."""
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, tokens=data.tokens, offsets=data.offsets,
                        prompt_lens=data.prompt_lens, prompt_ids=data.prompt_ids,
                        sample_ids=data.sample_ids, category_ids=data.category_ids,
                        is_finished=data.is_finished, anchor_starts=data.anchor_starts,
                        meta=np.array(json.dumps(data.meta)))
    tmp.replace(path)
    return path.stat().st_size


def load(path: Path) -> Sequences:
    with np.load(path) as f:
        arrays = {name: f[name] for name in f.files}
    meta = json.loads(str(arrays.pop("meta")))
    arrays.setdefault("anchor_starts", arrays["prompt_lens"].astype(np.int32))
    return Sequences(**arrays, meta=meta)


def proposal_vocab(data: Sequences, size: int, always: tuple[int, ...] = ()) -> dict[str, Any]:
    """cellspec's proposal_vocab.json for a draft trained on `data`: the `size` tokens most
    frequent in its answers (ties: the lower id), plus `always` (the eos ids), ascending; with
    the share of answer tokens they cover."""
    answers = np.concatenate([data.sequence(i)[data.prompt_lens[i]:] for i in range(len(data))])
    counts = np.bincount(answers.astype(np.int64), minlength=MAX_VOCAB)
    top = np.lexsort((np.arange(len(counts)), -counts))[:size]  # by count, then id
    ids = sorted(set(top[counts[top] > 0].tolist()) | set(always))
    return {"token_ids": ids, "answer_tokens_covered": round(float(
        counts[ids].sum() / max(len(answers), 1)), 6), "data": data.fingerprint()}
