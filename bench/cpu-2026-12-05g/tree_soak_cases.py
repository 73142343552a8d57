"""The three differences tree_soak.py found with seed 7 (twenty-second sitting, in about 4,000
cases; tree_soak_seed7.log), each sampled, in session 0. For each case: where the host
harness's trees and its plain decoding first differ (as the soak found); then ort-cpu (exact by
construction: attention by position) plain against its chains; the harness's plain against
ort-cpu's plain; the harness's trees against ort-cpu's plain. Run before and after the sitting's
keep_path change (a git worktree of b369a9a first on sys.path): the same three differences.

    python bench/cpu-2026-12-05f/tree_soak.py 7 60   (makes /tmp/treesoak/art; any seconds)
    python bench/cpu-2026-12-05g/tree_soak_cases.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import Sampling
from tests.runtime.test_dflash_oracle import spec_decode
from tests.runtime.test_executor import prompts, run_alone
from tests.runtime.test_trees import plain_on_tree_backend, queued_tree_backend, tree_backend

art = Path("/tmp/treesoak/art/artifact")
plain = plain_on_tree_backend(art)
CASES = [  # nodes, choices, max_verify_rows, sessions, sampling, backend, steps, seed
    (5, 2, None, 4, Sampling(temperature=0.5, top_p=0.5), queued_tree_backend, 26, 126949),
    (9, 3, None, 3, Sampling(temperature=1.3), tree_backend, 28, 518611),
    (13, 4, 17, 3, Sampling(temperature=1.3), queued_tree_backend, 17, 527906),
]


def speculative(spec, texts, sampling, seed, steps):
    spec.speculate_sampled = True
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed + i)
    return spec_decode(spec, sids, texts, steps)


def first_difference(a, b):
    return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)


for nodes, choices, rows, count, sampling, make, steps, seed in CASES:
    texts = prompts(count, seed=seed)
    trees = speculative(DFlashExecutor.load(art, backend=make(art), max_sessions=4,
                                            tree_nodes=nodes, tree_choices=choices,
                                            max_verify_rows=rows), texts, sampling, seed, steps)[0]
    host_plain = run_alone(plain, texts[0], sampling, seed, steps)[:steps]
    cpu_plain = run_alone(Executor.load(art, max_sessions=4), texts[0], sampling, seed,
                          steps)[:steps]
    cpu_chains = speculative(DFlashExecutor.load(art, max_sessions=4, n_draft=4), texts,
                             sampling, seed, steps)[0]
    print(f"seed {seed}: harness trees vs its plain first differ at "
          f"{first_difference(trees, host_plain)}; ort-cpu plain == its chains "
          f"{cpu_plain == cpu_chains}; harness plain == ort-cpu plain {host_plain == cpu_plain}; "
          f"harness trees == ort-cpu plain {trees == cpu_plain}")
