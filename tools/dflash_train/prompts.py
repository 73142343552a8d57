"""The prompt set: topics x tasks, one category label each, and a deterministic held-out split.

Every category's candidates are its templates filled with every combination of its word lists
(prompt_words.py) or, for arithmetic and word problems, with numbers from a seeded generator;
a seeded shuffle then keeps at most `per_category` of them. A prompt is held out iff the first
8 bytes of sha256(prompt) mod 1000 < HELD_OUT_PER_MILLE: a pure function of the text, so no
generation or training run ever sees a held-out prompt, whatever the seed or the count.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tools.dflash_train import prompt_words as w

HELD_OUT_PER_MILLE = 50  # ~5%
DEFAULT_SEED = 0
DEFAULT_PER_CATEGORY = 400


@dataclass(frozen=True)
class Prompt:
    category: str
    text: str

    @property
    def is_held_out(self) -> bool:
        digest = hashlib.sha256(self.text.encode()).digest()
        return int.from_bytes(digest[:8], "little") % 1000 < HELD_OUT_PER_MILLE


def _fill(templates: tuple[str, ...], **lists: tuple) -> Iterator[str]:
    """Every template with every combination of the lists its fields name."""
    for template in templates:
        names = [n for n in lists if re.search(r"\{" + n + r"[}\[]", template)]
        for values in itertools.product(*(lists[n] for n in names)):
            yield template.format(**dict(zip(names, values)))


def _factual(rng: random.Random) -> Iterator[str]:
    yield from _fill(("What is the capital of {c}?", "What language is spoken in {c}?",
                      "Tell me three interesting facts about {c}.", "What is {c} famous for?",
                      "Describe the climate of {c}.", "What currency does {c} use?"),
                     c=w.COUNTRIES)
    yield from _fill(("Who discovered or invented {x}?", "When did people first understand "
                      "{x}?", "What is {x}?"), x=w.CONCEPTS)


def _explain(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Explain {x} to {a}.", "Explain {x} in simple terms.", "Why is {x} "
                      "important?", "How does {x} work?", "Give a short explanation of {x}."),
                     x=w.CONCEPTS, a=w.AUDIENCES)


def _howto(rng: random.Random) -> Iterator[str]:
    yield from _fill(("How do I {t}?", "Give me step-by-step instructions to {t}.", "What is "
                      "the easiest way to {t}?", "What mistakes should I avoid when I {t}?"),
                     t=w.TASKS)
    yield from _fill(("I want to {t}. Where should I start?", "What tools do I need to {t}?",
                      "Write a checklist to {t}.", "Explain to a friend how to {t}."), t=w.TASKS)


def _python(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Write a Python function that {s}.", "Write a Python function that {s}, "
                      "with a docstring.", "Show me Python code that {s} and explain it "
                      "briefly.", "Write a Python function that {s}, and add a test.",
                      "Implement a function in Python that {s}.", "In Python, how do I write a "
                      "function that {s}?", "Write a short Python program that {s}.",
                      "Write a Python function with type hints that {s}."), s=w.PY_SPECS)


def _bash(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Write a bash command that {t}.", "How can I write a shell script that "
                      "{t}?", "Give me a one-line Linux command that {t}.", "What terminal "
                      "command {t}?"), t=w.BASH_TASKS)
    yield from _fill(("Write a SQL query that {t}.", "Show me an SQL statement that {t}."),
                     t=w.SQL_TASKS)
    yield from _fill(("Write a JavaScript function that {s}.",), s=w.PY_SPECS)


def _lists(rng: random.Random) -> Iterator[str]:
    yield from _fill(("List {n} {x}.", "Give me a numbered list of {n} {x}.", "Name {n} {x} "
                      "and say one sentence about each."), n=("three", "five", "seven", "ten"),
                     x=w.THINGS)


def _story(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Write a short story about {c} who {p}.", "Tell me a bedtime story about "
                      "{c} who {p}.", "Write the opening paragraph of a story about {c} who "
                      "{p}."), c=w.CHARACTERS, p=w.PLOTS)


def _poem(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Write a {f} about {s}.", "Compose a {f} about {s} for a child.",
                      "Write a sad {f} about {s}.", "Write a funny {f} about {s}."),
                     f=w.POEM_FORMS, s=w.POEM_SUBJECTS)


def _arithmetic(rng: random.Random) -> Iterator[str]:
    forms = ("What is {a} + {b}?", "What is {a} - {b}?", "Compute {a} times {b}.",
             "What is {a} divided by {b}?", "What is {p}% of {a}?", "Calculate {a} * {b} + {c}.",
             "Is {a} a prime number?", "What is the square of {b}?", "Round {a}.{c} to the "
             "nearest whole number.")
    while True:
        yield rng.choice(forms).format(a=rng.randint(2, 999), b=rng.randint(2, 99),
                                       c=rng.randint(1, 99), p=rng.choice((5, 10, 15, 20, 25,
                                                                           50, 75)))


def _word_problem(rng: random.Random) -> Iterator[str]:
    forms = (
        "{n} has {a} {i} and buys {b} more. How many {i} does {n} have now?",
        "{n} had {a} {i} and gave {b} to a friend. How many are left?",
        "A box holds {b} {i}. How many boxes does {n} need for {a} {i}?",
        "{n} reads {b} pages a day. How many days to finish a {a}-page book?",
        "A train travels at {b} km/h for {c} hours. How far does it go?",
        "{n} earns {b} dollars an hour and works {c} hours. How much does {n} earn?",
    )
    while True:
        yield rng.choice(forms).format(n=rng.choice(w.NAMES), i=rng.choice(w.ITEMS),
                                       a=rng.randint(10, 500), b=rng.randint(2, 40),
                                       c=rng.randint(2, 12))


def _compare(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Compare {p[0]} and {p[1]}.", "What is the difference between {p[0]} and "
                      "{p[1]}?", "What are the pros and cons of {p[0]} versus {p[1]}?",
                      "Which is better for a beginner, {p[0]} or {p[1]}? Explain.",
                      "How are {p[0]} and {p[1]} similar?", "Make a table comparing {p[0]} and "
                      "{p[1]}.", "Should I choose {p[0]} or {p[1]}?", "Give one advantage of "
                      "{p[0]} over {p[1]}."), p=w.PAIRS)


def _rewrite(rng: random.Random) -> Iterator[str]:
    yield from _fill(('Rewrite this sentence {y}: "{s}"',), y=w.STYLES, s=w.SENTENCES)
    yield from _fill(('Summarize in a few words: "{s}"', 'Fix any grammar mistakes in: "{s}"',
                      'Translate into French: "{s}"', 'What is the main idea of: "{s}"'),
                     s=w.SENTENCES)


def _define(rng: random.Random) -> Iterator[str]:
    yield from _fill(('What does the word "{x}" mean?', 'Use the word "{x}" in two sentences.',
                      'Give a synonym and an antonym for "{x}".', 'Define "{x}" for a child.',
                      'Write a short sentence that uses "{x}".', 'Where does the word "{x}" '
                      'come from?'), x=w.WORDS)


def _email(rng: random.Random) -> Iterator[str]:
    yield from _fill(("Write a short email to {r} {p}.", "Draft a text message to {r} {p}."),
                     r=w.RECIPIENTS, p=w.PURPOSES)
    yield from _fill(('Is this review positive or negative? "{r}"', 'Reply politely to this '
                      'customer review: "{r}"', 'Summarize this review: "{r}"', 'Rate this review '
                      'from 1 to 5 stars: "{r}"'), r=w.REVIEWS)


def _chat(rng: random.Random) -> Iterator[str]:
    yield from ("Hi! How are you today?", "What can you help me with?", "Tell me something fun.",
                "What is your name?", "Can you recommend a good book?", "I am bored. Any ideas?")
    yield from _fill(("Tell me a joke about {x}.", "Tell me a fun fact about {x}.", "What do you "
                      "know about {x}?", "Write a riddle about {x}.", "Why do people like {x}?",
                      "Say something nice about {x}."), x=w.JOKE_TOPICS)


CATEGORIES: dict[str, Callable[[random.Random], Iterator[str]]] = {
    "factual": _factual, "explain": _explain, "howto": _howto, "python": _python, "bash": _bash,
    "list": _lists, "story": _story, "poem": _poem, "arithmetic": _arithmetic,
    "word_problem": _word_problem, "compare": _compare, "rewrite": _rewrite, "define": _define,
    "email_review": _email, "chat": _chat,
}


def make_prompts(seed: int = DEFAULT_SEED, per_category: int = DEFAULT_PER_CATEGORY
                 ) -> list[Prompt]:
    """Unique prompts, category by category, at most `per_category` each (fewer where a category
    has fewer combinations); deterministic in (seed, per_category)."""
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for index, (category, source) in enumerate(CATEGORIES.items()):
        rng = random.Random(seed * 1000 + index)
        candidates = list(dict.fromkeys(itertools.islice(source(rng), 20 * per_category)))
        rng.shuffle(candidates)
        chosen = [text for text in candidates if text not in seen][:per_category]
        seen.update(chosen)
        prompts.extend(Prompt(category, text) for text in chosen)
    return prompts


def split(prompts: list[Prompt]) -> tuple[list[Prompt], list[Prompt]]:
    """(training, held-out)."""
    return ([p for p in prompts if not p.is_held_out], [p for p in prompts if p.is_held_out])


def interleaved(prompts: list[Prompt]) -> list[Prompt]:
    """The prompts category by category in turn (each category's first, then second, ...), so
    any prefix of the list covers the categories evenly."""
    rank: dict[str, int] = defaultdict(int)
    keyed = []
    for index, p in enumerate(prompts):
        keyed.append((rank[p.category], list(CATEGORIES).index(p.category), index, p))
        rank[p.category] += 1
    return [p for *_, p in sorted(keyed, key=lambda k: k[:3])]


def held_out_prompts(count: int) -> list[Prompt]:
    """The first `count` held-out prompts of the default prompt set, categories interleaved:
    prompts no draft trained on, for the benchmarks (tools/bench_spec.py, tools/gpu_bench.py)."""
    held_out = interleaved(split(make_prompts())[1])
    if count > len(held_out):
        raise SystemExit(f"{count} held-out prompts asked: the prompt set holds {len(held_out)}")
    return held_out[:count]


def held_out_texts(count: int) -> list[str]:
    """held_out_prompts' texts."""
    return [p.text for p in held_out_prompts(count)]


def write_prompts(prompts: list[Prompt], path: Path) -> None:
    with path.open("w") as f:
        for p in prompts:
            record = {"category": p.category, "prompt": p.text, "held_out": p.is_held_out}
            f.write(json.dumps(record) + "\n")


def fingerprint(prompts: list[Prompt]) -> str:
    """sha256 over every (category, prompt), in order: names the prompt set in logs and data."""
    digest = hashlib.sha256()
    for p in prompts:
        digest.update(f"{p.category}\t{p.text}\n".encode())
    return digest.hexdigest()[:16]
