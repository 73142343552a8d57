"""ONNX Runtime GenAI 0.18 (a benchmark dependency, never cellspec's) on the real SmolLM2 on a GPU:
tokens/s on the held-out prompts at one session, greedy, each answer to its eos or `--tokens`,
the workload `gpu_bench.py smollm2` times cellspec on; and each answer's tokens, which that
command compares with cellspec's (`--compare-tokens`).

    python tools/genai_smollm2_gpu.py --og OG --artifact ART --out genai.json [--prompts 16]
        [--tokens 96] [--repeats 2]

OG: GenAI's model folder of the same weights (its builder on an HF folder of the bundled GGUF:
`python -m onnxruntime_genai.models.builder -i HF -o OG -p fp16 -e cuda --extra_options
enable_cuda_graph=1`; `tools/gpu_run.sh genai-real` makes both). ART: a cellspec artifact of the
model, whose tokenizer and chat template turn the prompts into ids (so both runtimes see the
same ids; no ONNX Runtime session of cellspec's is opened in this process).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def prompt_ids(artifact: Path, count: int) -> list[list[int]]:
    """The first `count` held-out prompts as cellspec's LLM encodes them (chat template on)."""
    from cellspec.artifact import Manifest
    from cellspec.tokenizer import Tokenizer
    from tools.dflash_train.prompts import held_out_texts

    tokenizer = Tokenizer.load(artifact, Manifest.load(artifact))
    return [tokenizer.encode(text, tokenizer.has_chat_template)
            for text in held_out_texts(count)]


def answer(og, model, ids: list[int], tokens: int) -> list[int]:
    """GenAI's greedy answer to `ids`: at most `tokens` tokens, its eos included when it ends."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + tokens, do_sample=False, batch_size=1)
    generator = og.Generator(model, params)
    generator.append_tokens(np.asarray(ids, dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)[len(ids):]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--og", type=Path, required=True)
    parser.add_argument("--artifact", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    if args.prompts < 1 or args.tokens < 1 or args.repeats < 1:
        parser.error("--prompts, --tokens and --repeats must be >= 1")
    import onnxruntime_genai as og

    prompts = prompt_ids(args.artifact, args.prompts)
    model = og.Model(str(args.og))
    answer(og, model, prompts[0], 8)  # warm-up: the first captures its graph
    runs, answers = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        answers = [answer(og, model, ids, args.tokens) for ids in prompts]
        seconds = time.perf_counter() - start
        count = sum(len(a) for a in answers)
        runs.append({"tokens": count, "seconds": seconds, "tokens_per_s": count / seconds})
        print(json.dumps({"peer": "onnxruntime-genai " + og.__version__, **runs[-1]}),
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"peer": "onnxruntime-genai " + og.__version__,
                                    "og": str(args.og), "prompts": len(prompts),
                                    "max_tokens": args.tokens, "runs": runs,
                                    "answers": answers}, indent=1))


if __name__ == "__main__":
    main()
