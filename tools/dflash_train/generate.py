"""Self-distillation data: the target answers every training prompt in its chat format.

Jobs are (prompt, sample): sample 0 is the greedy answer, samples 1..K are drawn at
`temperature` with cellspec's rule (one uniform per position from the job's seed), so a job's
answer does not depend on its batch. All greedy jobs run first, then samples 1, 2, ...: a time
budget that stops the run early keeps the most useful data.

With `greedy_after` N > 0 a sampled job draws its first `cut` tokens (cut uniform in 0..N-1,
from the job's seed) and takes the argmax from there on: the greedy continuation of a sampled
context. Its anchors start at the cut, so every label a block learns is the target's greedy
choice after a greedy prefix, which is what a proposal must match at temperature 0, while the
sampled prefixes keep the contexts diverse. Within a pass, jobs are sorted by
prompt length, so a batch (left-padded, attention mask, KV cache) pads little.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers import DynamicCache

from tools.dflash_train import data as data_io
from tools.dflash_train.progress import Progress, RunLog, say
from tools.dflash_train.prompts import CATEGORIES, Prompt
from tools.dflash_train.sampling import positional_uniforms, sample_rows, splitmix64
from tools.dflash_train.target import CACHE_KEYWORD

SAVE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class Job:
    prompt_id: int
    sample_id: int  # 0 = greedy
    ids: tuple[int, ...]  # the chat-formatted prompt

    def seed(self, base: int) -> int:
        """The session seed of a sampled job: distinct per (base, prompt, sample)."""
        return (base << 32) ^ (self.prompt_id << 8) ^ self.sample_id

    def cut(self, base: int, greedy_after: int) -> int | None:
        """How many answer tokens a sampled job draws before it turns greedy: uniform in
        0..greedy_after-1 from its seed; 0 for the greedy job; None (sampled throughout) when
        greedy_after is 0."""
        if self.sample_id == 0:
            return 0
        if greedy_after <= 0:
            return None
        mixed = splitmix64(np.array([self.seed(base)], dtype=np.int64).astype(np.uint64))
        return int(mixed[0] % np.uint64(greedy_after))


@torch.no_grad()
def decode_batch(model, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                 eos_ids: Sequence[int], temperature: float, seeds: Sequence[int],
                 greedy_from: Sequence[int] | None = None) -> list[tuple[list[int], bool]]:
    """Each prompt's answer (up to and including its first eos) and whether it reached eos.
    The token drawn for position q uses positional_uniform(seed, q), as cellspec draws it;
    answer token k of row r is the argmax instead when k >= greedy_from[r]."""
    device = model.lm_head.weight.device
    n, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):  # left padding: every prompt ends at column width-1
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    next_pos = np.array([len(p) for p in prompts])  # the position the next drawn token takes
    cuts = np.full(n, max_new_tokens) if greedy_from is None else np.asarray(greedy_from)
    greedy_rows = torch.as_tensor(cuts, device=device)
    cache = {CACHE_KEYWORD: DynamicCache()}
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                   logits_to_keep=1, **cache).logits[:, -1]
    eos = torch.tensor(list(eos_ids), device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    drawn = []
    for step in range(max_new_tokens):
        if temperature == 0.0 or bool((cuts <= step).all()):
            token = torch.argmax(logits, dim=-1)
        else:
            token = sample_rows(logits, temperature, positional_uniforms(seeds, next_pos + step))
            if bool((cuts <= step).any()):  # some rows past their cut: their argmax
                token = torch.where(greedy_rows <= step, torch.argmax(logits, dim=-1), token)
        drawn.append(torch.where(done, eos[0], token))
        done |= torch.isin(token, eos)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
        step_pos = torch.as_tensor(next_pos + step, device=device)[:, None]
        logits = model(input_ids=drawn[-1][:, None], attention_mask=mask, position_ids=step_pos,
                       use_cache=True, **cache).logits[:, -1]
    return [_cut(row, eos_ids) for row in torch.stack(drawn, dim=1).tolist()]


def _cut(row: list[int], eos_ids: Sequence[int]) -> tuple[list[int], bool]:
    for i, token in enumerate(row):
        if token in eos_ids:
            return row[: i + 1], True
    return row, False


def plan_jobs(prompts: list[Prompt], prompt_ids: list[int], encode, num_samples: int,
              done: set[tuple[int, int]]) -> list[Job]:
    """Greedy jobs of every prompt, then sample 1 of every prompt, ...; jobs in `done` skipped;
    within a pass, by prompt length."""
    encoded = {i: tuple(encode(prompts[i].text)) for i in prompt_ids}
    jobs = []
    for sample in range(num_samples + 1):
        todo = [Job(i, sample, encoded[i]) for i in prompt_ids if (i, sample) not in done]
        jobs.extend(sorted(todo, key=lambda job: len(job.ids)))
    return jobs


def run_generate(model, tokenizer, prompts: list[Prompt], prompt_ids: list[int], out: Path,
                 log: RunLog, *, num_samples: int, temperature: float, seed: int,
                 max_new_tokens: int, batch: int, max_seconds: float | None,
                 greedy_after: int = 0, max_tokens: int = data_io.MAX_TOKENS,
                 existing: data_io.Sequences | None = None,
                 meta: dict | None = None) -> data_io.Sequences:
    """Generate every job not in `existing`, until max_seconds or max_tokens (the file's
    bound), saving to `out` as it goes (every SAVE_EVERY_SECONDS and at the end)."""
    categories = list(CATEGORIES)
    data = existing or data_io.empty({"categories": categories})
    data.meta.update(temperature=temperature, seed=seed, max_new_tokens=max_new_tokens,
                     **(meta or {}))
    if greedy_after:
        data.meta["greedy_after"] = greedy_after
    jobs = plan_jobs(prompts, prompt_ids, lambda text: tokenizer.encode(text, chat=True),
                     num_samples, data.done_jobs())
    progress = Progress(len(jobs), max_seconds)
    say("generate", f"{len(jobs)} jobs ({len(data)} sequences held), batch {batch}")
    new_tokens, last_save, batch_seconds, done_jobs = 0, time.time(), 0.0, 0
    for chunk in batches(jobs, batch):
        if max_seconds and progress.elapsed() + batch_seconds > max_seconds:
            say("generate", f"time budget reached after {done_jobs} jobs")
            break
        if data.num_tokens + len(chunk) * (max_new_tokens + len(chunk[-1].ids)) > max_tokens:
            say("generate", f"{data.num_tokens} tokens: the data file is full")
            break
        tick = time.time()
        data, count = _run_chunk(model, tokenizer, prompts, categories, chunk, data,
                                 max_new_tokens, temperature, seed, greedy_after)
        batch_seconds, done_jobs, new_tokens = time.time() - tick, done_jobs + len(chunk), (
            new_tokens + count)
        rate = new_tokens / progress.elapsed()
        say("generate", f"{done_jobs}/{len(jobs)} jobs, {new_tokens} new tokens, {rate:.0f} "
            f"answer tok/s, ETA {progress.eta(done_jobs):.0f} s")
        log.event(jobs=done_jobs, answer_tokens=new_tokens, answer_tokens_per_s=round(rate, 1))
        if time.time() - last_save > SAVE_EVERY_SECONDS:
            data_io.save(data, out)
            last_save = time.time()
    size = data_io.save(data, out)
    say("generate", f"{len(data)} sequences, {data.num_tokens} tokens, {out} {size / 1e6:.1f} MB")
    log.finish(sequences=len(data), tokens=data.num_tokens, new_answer_tokens=new_tokens,
               file_bytes=size, jobs_done=done_jobs, jobs_planned=len(jobs))
    return data


def batches(jobs: list[Job], size: int) -> list[list[Job]]:
    """Consecutive jobs, at most `size` a batch, a batch never mixing sample passes."""
    out: list[list[Job]] = []
    for job in jobs:
        if not out or len(out[-1]) == size or out[-1][-1].sample_id != job.sample_id:
            out.append([])
        out[-1].append(job)
    return out


def _run_chunk(model, tokenizer, prompts, categories, chunk: list[Job], data, max_new_tokens,
               temperature, seed, greedy_after: int) -> tuple[data_io.Sequences, int]:
    """Decode one batch of jobs (all of one sample pass) and append them to `data`."""
    greedy = chunk[0].sample_id == 0
    cuts = [job.cut(seed, greedy_after) for job in chunk]
    answers = decode_batch(model, [job.ids for job in chunk], max_new_tokens,
                           tokenizer.eos_token_ids, 0.0 if greedy else temperature,
                           [job.seed(seed) for job in chunk],
                           [max_new_tokens if cut is None else cut for cut in cuts])
    sequences = [np.array(job.ids + tuple(ans), dtype=np.int64) for job, (ans, _) in
                 zip(chunk, answers)]
    data = data_io.append(
        data, sequences, [len(job.ids) for job in chunk], [job.prompt_id for job in chunk],
        [job.sample_id for job in chunk],
        [categories.index(prompts[job.prompt_id].category) for job in chunk],
        [finished for _, finished in answers],
        [len(job.ids) + anchor_offset(cut, len(ans)) for job, cut, (ans, _) in
         zip(chunk, cuts, answers)])
    return data, sum(len(ans) for ans, _ in answers)


def anchor_offset(cut: int | None, answer_len: int) -> int:
    """Where in an answer its training anchors start: 0 for an answer greedy (cut 0) or sampled
    (None) throughout; else the token before the first greedy one, so that every label is
    greedy; the answer's end when it ended before turning greedy (then it has no anchor)."""
    if cut is None:
        return 0
    return answer_len if cut >= answer_len else max(cut - 1, 0)
