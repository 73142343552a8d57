"""Held-out acceptance: tau (tokens committed per speculate-verify cycle) per category.

With cellspec's sampling, the target's token at every position is a function of the prefix and
the position's uniform, so speculative decoding commits exactly the plain stream: a cycle
anchored at pending token t_p proposes d_1..d_n (the draft's argmax of rows 1..n), the target
draws t_{p+1}, t_{p+2}, ... and accepts while d_j == t_{p+j}, commits the accepted proposals
plus its own draw, and the next cycle is anchored at p + accepted + 1. So the evaluation
decodes each held-out prompt's plain stream once (batched, KV cache; greedy, or sampled with
positional uniforms), scores the draft's block at every anchor of it in packed forwards
(`accepted[p]`), and walks the cycles through `accepted`. `speculative_decode` runs the literal
loop (the target verifying the draft's proposals) for one prompt; the tests check that both
commit the same tokens in the same cycles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import torch

from tools.dflash_train.generate import decode_batch
from tools.dflash_train.model import DFlashDraft
from tools.dflash_train.progress import say
from tools.dflash_train.prompts import Prompt
from tools.dflash_train.target import target_taps
from tools.dflash_train.train import block_hidden

EVAL_SEED = 1 << 20  # session seeds of sampled eval streams: EVAL_SEED + prompt index


def walk_cycles(accepted: np.ndarray, start: int, length: int) -> tuple[int, int]:
    """Cycles and accepted proposals of speculative decoding over a stream of `length` tokens
    whose first answer token is at `start`: accepted[p] is the accepted count of a cycle
    anchored at p. A cycle runs while the anchor has a token after it (p <= length - 2)."""
    cycles = total = 0
    p = start
    while p <= length - 2:
        cycles, total = cycles + 1, total + int(accepted[p])
        p += int(accepted[p]) + 1
    return cycles, total


@torch.no_grad()
def accepted_counts(draft: DFlashDraft, target, embed, lm_head, ids: torch.Tensor,
                    lengths: np.ndarray, prompt_lens: np.ndarray, n_draft: int,
                    max_rows: int = 8192) -> np.ndarray:
    """ids [N, S] right-padded streams -> accepted [N, S]: for every anchor P <= p <= L-2, how
    many leading proposals d_1..d_n equal t_{p+1}..t_{p+n} (0 elsewhere). Anchors go through
    the draft in packed chunks of at most `max_rows` proposal rows (logits [rows, V])."""
    taps = target_taps(target, ids, draft.cfg.tap_layer_ids)
    accepted = np.zeros(ids.shape, dtype=np.int64)
    stream = ids.cpu().numpy()
    width = int(max(lengths - 1 - prompt_lens))
    chunk = max(1, max_rows // (len(ids) * n_draft))
    for first in range(0, width, chunk):
        offsets = np.arange(first, min(first + chunk, width))
        anchors = np.minimum(prompt_lens[:, None] + offsets, lengths[:, None] - 2)
        rows = block_hidden(draft, embed, ids, taps, torch.from_numpy(anchors).to(ids.device))
        proposals = (rows[:, :, 1: n_draft + 1] @ lm_head.T).argmax(-1).cpu().numpy()
        for i in range(len(ids)):
            for a, p in enumerate(anchors[i]):
                truth = stream[i, p + 1: min(p + 1 + n_draft, lengths[i])]
                match = proposals[i, a, : len(truth)] == truth
                accepted[i, p] = len(truth) if match.all() else int(np.argmin(match))
    return accepted


def evaluate(draft: DFlashDraft, target, tokenizer, prompts: Sequence[Prompt], *,
             temperature: float, max_new_tokens: int, n_drafts: Sequence[int],
             batch: int) -> dict[str, dict]:
    """{n_draft: {category or "all": tau, cycles, accepted, answer tokens}} over `prompts` at
    `temperature`, for every proposal count in n_drafts (a cycle proposing n accepts
    min(accepted at n_max, n): the same leading matches, cut at n)."""
    device = target.lm_head.weight.device
    embed, lm_head = target.model.embed_tokens.weight, target.lm_head.weight
    scored = []  # (category, accepted [S], answer start, stream length) per prompt
    for first in range(0, len(prompts), batch):
        group = list(range(first, min(first + batch, len(prompts))))
        prompt_ids = [tokenizer.encode(prompts[i].text, chat=True) for i in group]
        answers = decode_batch(target, prompt_ids, max_new_tokens, tokenizer.eos_token_ids,
                               temperature, [EVAL_SEED + i for i in group])
        streams = [p + a for p, (a, _) in zip(prompt_ids, answers)]
        lengths = np.array([len(s) for s in streams])
        prompt_lens = np.array([len(p) for p in prompt_ids])
        keep = np.flatnonzero(lengths - prompt_lens >= 2)
        ids = torch.zeros((len(keep), int(lengths.max())), dtype=torch.long)
        for row, i in enumerate(keep):
            ids[row, : lengths[i]] = torch.tensor(streams[i])
        accepted = accepted_counts(draft, target, embed, lm_head, ids.to(device), lengths[keep],
                                   prompt_lens[keep], max(n_drafts))
        scored += [(prompts[group[i]].category, accepted[row], prompt_lens[i], lengths[i])
                   for row, i in enumerate(keep)]
        tau = summarize(scored, max(n_drafts))["all"]["tau"]
        say("eval", f"T={temperature}: {group[-1] + 1}/{len(prompts)} prompts, tau so far "
            f"{tau:.3f} (n_draft {max(n_drafts)})")
    return {str(n): summarize(scored, n) for n in n_drafts}


def summarize(scored: list[tuple], n_draft: int) -> dict[str, dict]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # cycles, accepted, tokens
    for category, accepted, start, length in scored:
        cycles, total = walk_cycles(np.minimum(accepted, n_draft), start, length)
        for key in (category, "all"):
            counts[key] = [counts[key][0] + cycles, counts[key][1] + total,
                           counts[key][2] + int(length - start)]
    return {key: {"tau": round(_tau(v), 4), "cycles": v[0], "accepted": v[1], "tokens": v[2]}
            for key, v in sorted(counts.items())}


def _tau(counts: list[int]) -> float:
    return (counts[1] + counts[0]) / counts[0] if counts[0] else float("nan")


@torch.no_grad()
def speculative_decode(draft: DFlashDraft, target, prompt: Sequence[int], max_new_tokens: int,
                       eos_ids: Sequence[int], n_draft: int) -> tuple[list[int], int, int]:
    """The literal greedy loop for one prompt, without caches: the draft proposes from the
    taps of the committed tokens, the target verifies [pending, d_1..d_n] in one forward, the
    cycle commits the pending token and the accepted proposals, and the target's next draw
    becomes the pending token. Acceptance stops at an accepted eos and at max_new_tokens (the
    stream ends there). -> (answer, cycles, accepted proposals)."""
    device = target.lm_head.weight.device
    embed, lm_head = target.model.embed_tokens.weight, target.lm_head.weight
    committed = list(prompt)
    answer = [int(target(torch.tensor([committed], device=device)).logits[0, -1].argmax())]
    cycles = accepted_total = 0
    while answer[-1] not in eos_ids and len(answer) < max_new_tokens:
        ids = torch.tensor([committed + answer[-1:]], device=device)  # pending at len(committed)
        taps = target_taps(target, ids, draft.cfg.tap_layer_ids)
        anchor = torch.tensor([[len(committed)]], device=device)
        rows = block_hidden(draft, embed, ids, taps, anchor)[0, 0, 1: n_draft + 1]
        proposals = (rows @ lm_head.T).argmax(-1).tolist()
        verify = torch.tensor([committed + answer[-1:] + proposals], device=device)
        drawn = target(verify).logits[0, len(committed):].argmax(-1).tolist()  # n + 1 draws
        room = max_new_tokens - len(answer)  # stream tokens left after the pending one
        accepted = _accepted(proposals, drawn, room, eos_ids)
        ends = accepted > 0 and proposals[accepted - 1] in eos_ids
        committed += answer[-1:] + proposals[:accepted]
        answer += drawn[: accepted if ends else accepted + 1][:room]
        cycles, accepted_total = cycles + 1, accepted_total + accepted
    return answer, cycles, accepted_total


def _accepted(proposals: list[int], drawn: list[int], room: int, eos_ids: Sequence[int]) -> int:
    """Leading proposals equal to the target's draws, within `room` tokens and up to an eos."""
    count = 0
    for proposal, truth in zip(proposals[:room], drawn):
        if proposal != truth:
            break
        count += 1
        if proposal in eos_ids:
            break
    return count
