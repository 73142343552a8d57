"""Prompts the target writes itself: more distinct prompts than the templates of prompts.py hold.

New prompt i takes an example from the training prompts (categories in turn) and asks the target,
in its chat format, for one new request of the same kind about something else; the answer is
drawn at `temperature` with cellspec's rule from a seed of (base, i), so the same target and
seed write the same prompts. The request is the answer's first non-empty line, stripped of
quotes and a leading "Request:"-style label. It is kept when it is 8 to 300 characters long,
does not open as the assistant talking about the task instead of asking ("Here's ...", "I'm
ready ...", "Sure", markdown; a third of SmolLM2's answers on a CPU sample of 16), is new
(neither a template prompt nor an earlier one) and is not held out by the prompt set's hash
rule, so the held-out evaluation never sees it; it keeps its example's category.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tools.dflash_train.generate import decode_batch
from tools.dflash_train.progress import say
from tools.dflash_train.prompts import Prompt, interleaved

INSTRUCTION = ("Write one new request that a user might send to an AI assistant. Make it the "
               "same kind of request as the example, but about something else. Reply with the "
               "request only.\n\nExample: {example}")
MIN_CHARS, MAX_CHARS = 8, 300
_LABEL = re.compile(r"^\s*(new\s+)?(request|prompt|question|example)\s*[:\-]\s*", re.IGNORECASE)
_NOT_A_REQUEST = re.compile(r"^(here(\s+is|'s|\s+are)\b|i(\s+am|'m|\s+can|\s+will|'d|'ll)\b|sure\b|"
                            r"certainly\b|of course\b|what a\b|\*\*|#)", re.IGNORECASE)


def clean(answer: str) -> str | None:
    """The request in a written answer, or None when there is none worth keeping."""
    lines = [line.strip() for line in answer.splitlines() if line.strip()]
    if not lines:
        return None
    text = _LABEL.sub("", lines[0]).strip().strip('"\u201c\u201d\'').strip()
    if _NOT_A_REQUEST.match(text):
        return None
    return text if MIN_CHARS <= len(text) <= MAX_CHARS else None


def write_prompts(model, tokenizer, prompts: Sequence[Prompt], training_ids: Sequence[int],
                  count: int, *, temperature: float, seed: int, batch: int,
                  max_new_tokens: int = 64) -> list[Prompt]:
    """Up to `count` new training prompts written by the target (fewer where answers are
    dropped), in the order asked."""
    examples = interleaved([prompts[i] for i in training_ids])
    if not examples or count <= 0:
        return []
    known = {p.text for p in prompts}
    written: list[Prompt] = []
    for start in range(0, count, batch):
        asked = [(i, examples[i % len(examples)]) for i in range(start, min(start + batch, count))]
        answers = decode_batch(
            model, [tokenizer.encode(INSTRUCTION.format(example=p.text), chat=True)
                    for _, p in asked],
            max_new_tokens, tokenizer.eos_token_ids, temperature,
            [(seed << 32) ^ (1 << 31) ^ i for i, _ in asked])
        for (_, example), (answer, _) in zip(asked, answers):
            ids = [t for t in answer if t not in tokenizer.eos_token_ids]
            text = clean(tokenizer.decode(ids))
            if text is None or text in known or Prompt(example.category, text).is_held_out:
                continue
            known.add(text)
            written.append(Prompt(example.category, text))
        say("self-prompts", f"{min(start + batch, count)}/{count} asked, {len(written)} kept")
    return written
