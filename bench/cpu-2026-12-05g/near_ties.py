"""The differences of `tree_soak.py 11 1500 ort-cpu` (twenty-second sitting; the soak checked
against ort-cpu's exact plain text). For each: the logits ort-cpu gives at the position where the
harness's trees and ort-cpu's plain decoding first differ, and the tokens the sampling rule draws
from them with that position's uniform under 2,000 perturbations of 1e-6 relative (about the
size of the roundings). Each flips between exactly the two tokens: near-ties between the
harness's attention and ort-cpu's, not a speculation error.

    python bench/cpu-2026-12-05f/tree_soak.py 11 60 ort-cpu   (makes /tmp/treesoak/art)
    python bench/cpu-2026-12-05g/near_ties.py
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.sampling import positional_uniform, sample_token
from cellspec.runtime.types import BatchInput, Sampling
from tests.runtime.test_dflash_oracle import spec_decode
from tests.runtime.test_executor import prompts, run_alone
from tests.runtime.test_trees import tree_backend

art = Path("/tmp/treesoak/art/artifact")
sampling = Sampling(temperature=1.3)
CASES = [  # nodes, choices, max_verify_rows, sessions, steps, seed
    (8, None, None, 4, 15, 736160), (9, 3, None, 2, 14, 496719), (5, 2, 12, 3, 30, 61029),
    (8, 4, 18, 4, 25, 633700)]

for nodes, choices, rows, count, steps, seed in CASES:
    texts = prompts(count, seed=seed)
    spec = DFlashExecutor.load(art, backend=tree_backend(art), max_sessions=4, tree_nodes=nodes,
                               tree_choices=choices, max_verify_rows=rows)
    spec.speculate_sampled = True
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed + i)
    speculative = spec_decode(spec, sids, texts, steps)
    for s, text in enumerate(texts):  # the first session that differs
        plain = run_alone(Executor.load(art, max_sessions=4), text, sampling, seed + s,
                          steps)[:steps]
        if speculative[s] != plain:
            break
    trees = speculative[s]
    j = next(k for k in range(steps) if trees[k] != plain[k])
    # ort-cpu's logits of token j's draw: the prompt, then plain[:j] one step at a time
    cpu = Executor.load(art, max_sessions=4)
    sid = cpu.open_session()
    cpu.set_sampling(sid, sampling, seed + s)
    prompt = tuple(texts[s])
    cpu.execute([BatchInput(sid, prompt, 0)])
    for token in plain[: j - 1]:
        cpu.execute([BatchInput(sid, (token,), cpu.pos(sid))])
    logits = cpu.target.forward(np.array([sid]), np.array([plain[j - 1]]), np.array([0]),
                                None).logits[0]
    uniform = positional_uniform(seed + s, len(prompt) + j)
    rng = np.random.default_rng(0)
    drawn: dict[int, int] = {}
    for _ in range(2000):
        noisy = (logits * (1 + 1e-6 * rng.standard_normal(logits.size))).astype(np.float32)
        token = sample_token(noisy, sampling.temperature, 1.0, 0, uniform)
        drawn[token] = drawn.get(token, 0) + 1
    print(f"seed {seed}: session {s}'s first difference at token {j}: plain {plain[j]}, "
          f"trees {trees[j]}; "
          f"from ort-cpu's logits {sample_token(logits, sampling.temperature, 1.0, 0, uniform)}; "
          f"under 1e-6 relative noise {drawn}")
