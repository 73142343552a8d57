"""Greedy tokens of an int4 (or any) SmolLM2 artifact against transformers' float32 model read
from the same GGUF: per prompt, how many of the first N tokens agree before the first
difference, and the share of positions that agree.

    python tools/int4_agreement.py ARTIFACT [--tokens 64]      # the tests' 4 prompts
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", type=Path)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    import torch
    import transformers
    from tokenizers import Tokenizer

    from cellspec.export.gguf import find_bundled_gguf
    from cellspec.runtime.executor import Executor
    from tests.e2e.test_smollm2 import PROMPTS, hf_greedy
    from tests.gpu.test_ort_cuda import decode

    torch.set_num_threads(2)
    gguf = find_bundled_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32, attn_implementation="eager").eval()
    tokenizer = Tokenizer.from_file(str(args.artifact / "tokenizer.json"))
    executor = Executor.load(args.artifact, max_sessions=1)
    from cellspec.runtime.types import Sampling

    for prompt in PROMPTS:
        ids = tokenizer.encode(prompt, add_special_tokens=False).ids
        ours = decode(executor, [ids], Sampling(), args.tokens)[0]
        theirs = hf_greedy(model, ids, args.tokens)
        prefix = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), args.tokens)
        same = sum(a == b for a, b in zip(ours, theirs))
        print(f"{prompt[:40]!r:44s} first difference at token {prefix:3d} of {args.tokens}; "
              f"{same}/{args.tokens} positions agree")


if __name__ == "__main__":
    main()
