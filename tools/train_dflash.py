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

A run folder RUN holds data.npz (uint16 ids; capped at 10M tokens, about 7 MB), ckpt/
(checkpoint.json + three <= 15 MB safetensors shards: fp32 weights, bf16 Adam moments; 43.4 MB
for the default draft), draft/ (config.json + float16 model.safetensors, 10.8 MB) and log.json
(settings, progress events and results of every phase). Every phase prints progress (steps,
loss, tau estimate, tokens/s, ETA) and stops cleanly at its time budget, keeping what it has.

`generate --greedy-after N` makes each sampled answer greedy after a cut uniform in 0..N-1 and
trains only on its greedy tail (the labels a proposal must match at temperature 0).
`generate --self-prompts N` first has the target write up to N more prompts, each like a
template prompt (tools/dflash_train/self_prompts.py; recorded in data.npz's meta), since the
templates cap the non-numeric categories at about 4,100 prompts. The shipped draft is the
round-3 draft continued on greedy-tail data twice (bench/NOTES.md, 2026-12-01, third sitting:
`bash tools/gpu_run.sh greedy-gen`, `greedy-train`, `greedy-more`), then twice more on
greedy-gen's data extended over 6,602 prompts SmolLM2 wrote (fourth sitting: `self-gen`,
`self-train`, `self-more`).

Default draft (5.42M parameters): 2 layers, MLP 768, block 16, gamma 7, taps 1,14,27 (z-lab's
spacing), mask token 16 (<empty_output>: an untrained special token), AdamW lr 6e-4, 100 warmup
steps, cosine to 6e-5, 32 sequences x 64 anchors a step. Eval reports tau for n_draft 15, 7, 3.
`--init DRAFT --layers N` grows a draft with identity layers; `--init DRAFT --taps IDS` retaps
it (its fc reads the new layers block by block; added taps start at zero). Measured choices
(bench/NOTES.md): 4 layers gave +0.04 tau over 2 (2026-12-01); the target's last layer in place
of 27 lost 0.11 and as a fourth tap gave nothing (2026-12-02, seventh sitting).

On the GPU machine (Python 3.12, torch 2.11 + CUDA 13, transformers 5.17, numpy, safetensors,
tokenizers, jinja2; no `gguf`, no `onnx`, no network): install the carried gguf wheel
(`pip install --no-deps gguf-*.whl`; its yaml import is satisfied by transformers' pyyaml) and
join the GGUF parts (`cat SmolLM2-135M-Instruct.Q4_1.gguf.part* > smollm2.gguf`). onnx is not
needed: cellspec.export's readers load without running cellspec/export/__init__.py.

  run 1 (~8.5 min): generate <= 240 s, train 200 s (schedule planned for 600 s of training),
  eval on the 205 held-out prompts at T=0 and 0.7, no draft export (8 files / 64 MB limit):
     python tools/train_dflash.py all --target smollm2.gguf --out $OUT/run1 --no-export \
         --generate-seconds 240 --samples 5 --gen-batch 1024 \
         --train-seconds 200 --steps 0 --plan-seconds 600 --eval-batch 128
     brings back data.npz, log.json, ckpt/ (6 files, <= 59 MB)
  run 2 (~8 min): the same schedule continued on the same data, then eval and export:
     python tools/train_dflash.py all --target smollm2.gguf --out $OUT/run2 \
         --data run1/data.npz --generate-seconds 0 --resume run1/ckpt --train-seconds 400
     brings back log.json, ckpt/, draft/ (7 files, 54 MB)
  then here: cellspec.export.export(gguf, out, ExportConfig(...), draft="run2/draft").
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's cellspec and tools/, whatever the cwd

from tools.dflash_train.cli import run  # noqa: E402 (after the path is set)

if __name__ == "__main__":
    run()
