"""Drafts shipped with cellspec: a DFlash draft (z-lab format) for the bundled
SmolLM2-135M-Instruct, trained by self-distillation with tools/train_dflash.py (the recipe, data
and measurements are in bench/NOTES.md). The bundled model's export always includes it
(`model_cache.bundled_export`, int4); `LLM()` and `cellspec generate` speculate with it by
default, and `speculation=False` / `--no-speculation` decode the same export plainly. Its
proposal_vocab.json (the 16,384 tokens most frequent in its training answers) narrows the
draft's LM head to those rows, the int4 head's blocks included; the verify keeps the text exact
whatever it proposes."""

from __future__ import annotations

from pathlib import Path

SMOLLM2_DRAFT = Path(__file__).resolve().parent / "smollm2-135m-instruct"


def bundled_draft() -> Path | None:
    """The folder of the bundled model's draft, or None when this install has none."""
    return SMOLLM2_DRAFT if (SMOLLM2_DRAFT / "config.json").is_file() else None
