"""Train a DFlash draft (z-lab DFlashDraftModel format) for a cellspec target by self-distillation.

The target (default: the bundled SmolLM2-135M-Instruct GGUF, read by cellspec) answers a
programmatic prompt set in its chat format; the draft learns to propose the target's next
tokens from the target's hidden states (taps), z-lab's recipe: random anchors in the answers,
blocks [anchor, mask, ...] attending to the taps before their anchor and bidirectionally to
themselves, cross entropy of rows 1..B-1 weighted exp(-(j-1)/gamma), the target's embedding and
LM head frozen and not saved. Code: tools/dflash_train/ (one concept a module).

    python tools/train_dflash.py prompts  --out prompts.jsonl          # inspect the prompt set
    python tools/train_dflash.py generate --out RUN [--generate-seconds S] [--samples 2]
    python tools/train_dflash.py train    --out RUN [--train-seconds S] [--resume RUN0/ckpt]
    python tools/train_dflash.py eval     --out RUN --checkpoint RUN/ckpt      # tau per category
    python tools/train_dflash.py export   --checkpoint RUN/ckpt --draft-out RUN/draft
    python tools/train_dflash.py all      --out RUN --generate-seconds G --train-seconds T

A run folder RUN holds data.npz (uint16 ids, < 16 MB for ~4M tokens), ckpt/ (checkpoint.json
and <= 15 MB safetensors shards: fp32 weights, bf16 Adam moments; ~43 MB for the default
5.4M-parameter draft), draft/ (config.json + model.safetensors, float16, ~11 MB) and log.json
(settings, progress events, results of every phase). Every phase prints progress (step, loss,
tau estimate, tokens/s, ETA) and stops cleanly at its time budget, keeping what it has.

On the GPU machine (Python 3.12, torch 2.11 + CUDA 13, transformers 5.17, numpy, safetensors,
tokenizers, jinja2; no `gguf`, no `onnx`, no network):
  1. carry the repo, the gguf wheel and the GGUF parts; then
     pip install --no-deps gguf-*.whl && cat SmolLM2-135M-Instruct.Q4_1.gguf.part* > smollm2.gguf
     (gguf imports yaml, which transformers already requires; onnx is not needed: the tool
     loads cellspec.export's readers without running cellspec/export/__init__.py)
  2. first run (~9 min): generate 200 s, train 230 s, eval + export ~40 s:
     python tools/train_dflash.py all --target smollm2.gguf --out $OUT/run1 \\
         --generate-seconds 200 --gen-batch 512 --train-seconds 230 --steps 0 \\
         --plan-seconds 700 --eval-prompts 128
     (--plan-seconds 700 plans the cosine over this run and the next; bring back everything
     under $OUT/run1: data.npz, log.json, ckpt/*, draft/*: 8 files, < 64 MB)
  3. second run, continuing the same schedule on the same data:
     python tools/train_dflash.py all --target smollm2.gguf --out $OUT/run2 \\
         --data run1/data.npz --generate-seconds 0 --resume run1/ckpt --train-seconds 440 \\
         --eval-prompts 0
  4. here: export the artifact with cellspec (`draft=run2/draft`) and measure tau in cellspec.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's cellspec and tools/, whatever the cwd

from tools.dflash_train.cli import run  # noqa: E402 (after the path is set)

if __name__ == "__main__":
    run()
