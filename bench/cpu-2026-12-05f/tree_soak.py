"""A randomized differential soak of tree speculation (twenty-first sitting): DFlashExecutor over
the tests' IOBinding backends on the CPU (host and queued, as ort-cuda's), random tree_nodes
(2..15), tree_choices, max_verify_rows, 1-4 sessions and samplings, against plain decoding of
each prompt alone; checks the text and that no cell stays in use. The tests' tiny random
draft accepts almost nothing, so this covers the refusals, the queueing and rejections, not long
accepted paths (test_trees' TreeOracle does).

    python bench/cpu-2026-12-05f/tree_soak.py SEED SECONDS [harness|ort-cpu]

The plain text checked against: the harness's own plain decoding (the default, as the
twenty-first sitting ran it), or ort-cpu's (exact by construction; the twenty-second sitting
found every difference against the harness's plain text to be its rounding, not the trees').
"""
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cellspec.runtime.dflash import DFlashExecutor
from cellspec.runtime.executor import Executor
from cellspec.runtime.types import Sampling
from tests.conftest import export_dflash
from tests.runtime.test_dflash_oracle import spec_decode
from tests.runtime.test_executor import prompts, run_alone
from tests.runtime.test_trees import plain_on_tree_backend, queued_tree_backend, tree_backend

shutil.rmtree("/tmp/treesoak/art", ignore_errors=True)  # made again, as every run made it
art = export_dflash(Path("/tmp/treesoak/art"), static_widths=(1, 2, 4, 8), dynamic_width=32,
                    max_context=128, max_cells=512)
against = sys.argv[3] if len(sys.argv) > 3 else "harness"
if against not in ("harness", "ort-cpu"):
    sys.exit(f"against {against!r}: harness or ort-cpu")
plain = plain_on_tree_backend(art) if against == "harness" else Executor.load(art, max_sessions=4)
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
deadline = time.time() + float(sys.argv[2]) if len(sys.argv) > 2 else time.time() + 600
cases = fails = 0
while time.time() < deadline:
    nodes = rng.randint(2, 15)
    choices = rng.choice([None, 1, 2, 3, 4])
    if choices is not None and sum(choices ** d for d in range(1, 16)) < nodes:
        choices = None
    count = rng.randint(1, 4)
    rows = rng.choice([None, None, 2 * (nodes + 1), 10, 17])
    sampling = rng.choice([Sampling(), Sampling(temperature=0.8, top_p=0.9, top_k=40),
                           Sampling(temperature=1.3), Sampling(temperature=0.5, top_p=0.5)])
    make = rng.choice([tree_backend, queued_tree_backend])
    steps = rng.randint(8, 30)
    seed = rng.randint(0, 10**6)
    texts = prompts(count, seed=seed)
    expected = [run_alone(plain, p, sampling, seed=seed + i, steps=steps)
                for i, p in enumerate(texts)]
    try:
        spec = DFlashExecutor.load(art, backend=make(art), max_sessions=4, tree_nodes=nodes,
                                   tree_choices=choices, max_verify_rows=rows)
    except Exception as e:  # a refusal is fine where the combination is invalid
        print("refused", nodes, choices, rows, type(e).__name__, e)
        continue
    spec.speculate_sampled = True
    sids = [spec.open_session() for _ in texts]
    for i, sid in enumerate(sids):
        spec.set_sampling(sid, sampling, seed + i)
    got = spec_decode(spec, sids, texts, steps)
    cases += 1
    ok = got == [e[:steps] for e in expected]
    for sid in sids:
        spec.close_session(sid)
    leak = spec.cache.num_used != 0 or spec.draft.cache.num_used != 0
    if not ok or leak:
        fails += 1
        print("FAIL", dict(nodes=nodes, choices=choices, rows=rows, count=count, sampling=sampling,
                           make=make.__name__, steps=steps, seed=seed, leak=leak), flush=True)
    if cases % 20 == 0:
        print(f"{cases} cases, {fails} failures; tau {spec.stats.tau:.2f}", flush=True)
print(f"done: {cases} cases, {fails} failures")
