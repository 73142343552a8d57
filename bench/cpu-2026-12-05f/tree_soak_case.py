"""The one difference tree_soak.py found (seed 1, 2,940 cases): 3 sessions, sampled (T 0.8,
top-p 0.9, top-k 40), seed 439703, 16 tokens. The third session's 16th token is 85 under
speculation (chains and trees, every tree_choices and max_verify_rows) and 42 under plain
decoding on the tests' host backend, whose exported attention over [cells ; new tokens]
rounds a one-row step otherwise than a verify row (test_trees.tree_backend's docstring). ort-cpu's
by-position attention, exact by construction, gives 85 both plain and speculating: a sampled
draw at a near-tie between the harness's two roundings, not a speculation error.

    python bench/cpu-2026-12-05f/tree_soak_case.py   (after tree_soak.py has made the artifact)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import Sampling
from tests.runtime.test_dflash_oracle import spec_decode
from tests.runtime.test_executor import prompts, run_alone
from tests.runtime.test_trees import plain_on_tree_backend, tree_backend

art = Path("/tmp/treesoak/art/artifact")
sampling, seed, steps = Sampling(temperature=0.8, top_p=0.9, top_k=40), 439703, 16
texts = prompts(3, seed=seed)


def speculative(spec):
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed + i)
    return spec_decode(spec, sids, texts, steps)[2]


print("host backend, plain   ", run_alone(plain_on_tree_backend(art), texts[2], sampling,
                                           seed + 2, steps))
print("host backend, tree 7:3", speculative(DFlashExecutor.load(
    art, backend=tree_backend(art), max_sessions=4, tree_nodes=7, tree_choices=3)))
print("ort-cpu, plain        ", run_alone(Executor.load(art, max_sessions=4), texts[2], sampling,
                                           seed + 2, steps))
print("ort-cpu, chain of 4   ", speculative(DFlashExecutor.load(art, max_sessions=4, n_draft=4)))
