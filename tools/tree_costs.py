"""What a tree cycle costs the host, piece by piece, and what draft_block's tree outputs cost a
block on the CPU (bench/NOTES.md, 2026-12-03, second sitting).

    python tools/tree_costs.py host [--nodes 15] [--depth 15]
    python tools/tree_costs.py block ARTIFACT [--n-draft 7] [--rounds 3]
    python tools/tree_costs.py paths ARTIFACT [--prompts 8] [--tokens 64] [--nodes 15]

`host`: microseconds per call of grow_tree, main_path, walk, tree_feeds and keep_path at a
tree's size (random choices, a sequence of 300 positions). `block`: ms per draft_block call on
ort-cpu, as loaded (tree outputs stripped) and with them kept, in turn, `--rounds` times.
`paths`: how often a greedy tree cycle's accepted path stays on the tree's main path (see
main_path_share).
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def host_costs(nodes: int, depth: int, calls: int = 2000) -> dict[str, float]:
    from cellspec.runtime.cell_cache import CellCache
    from cellspec.runtime.target import tree_feeds
    from cellspec.runtime.trees import grow_tree, walk

    rng = np.random.default_rng(0)
    logp = np.sort(rng.normal(size=(depth, 4)) * 2, axis=1)[:, ::-1] - 5
    ids = rng.integers(0, 1000, size=(depth, 4))
    tree = grow_tree(ids, logp, nodes)
    drawn = np.concatenate([[tree.tokens[0]], rng.integers(0, 1000, tree.rows - 1)])
    cache = CellCache(4096)
    cache.seq_new(0)
    cache.commit_step(cache.declare_step([0], [300]))
    plan = cache.declare_step([0], [tree.rows], tree.rows, 512)
    path, _ = walk(tree, drawn)

    def verified() -> CellCache:
        fresh = CellCache(4096)
        fresh.seq_new(0)
        fresh.commit_step(fresh.declare_step([0], [300 + tree.rows]))
        return fresh

    caches = iter([verified() for _ in range(calls)])

    def per_call(work) -> float:
        return 1e6 * timeit.timeit(work, number=calls) / calls

    return {"grow_tree": per_call(lambda: grow_tree(ids, logp, nodes)),
            "main_path": per_call(tree.main_path),
            "walk": per_call(lambda: walk(tree, drawn)),
            "tree_feeds": per_call(lambda: tree_feeds(plan, tree.parents[None])),
            "keep_path": per_call(lambda: next(caches).keep_path(0, 300, path))}


def block_costs(artifact: Path, n_draft: int, rounds: int) -> dict[str, list[float]]:
    from cellspec.runtime import ort_cpu
    from cellspec.runtime.dflash import DFlashExecutor
    from cellspec.runtime.draft import ProposalRequest
    from cellspec.runtime.types import BatchInput, Sampling

    stripped = ort_cpu.without_tree_choices
    results: dict[str, list[float]] = {}
    for _ in range(rounds):
        for form in ("stripped", "kept"):
            ort_cpu.without_tree_choices = stripped if form == "stripped" else (lambda m: m)
            spec = DFlashExecutor.load(artifact, max_sessions=2, threads=2)
            ort_cpu.without_tree_choices = stripped
            sid = spec.open_session()
            spec.set_sampling(sid, Sampling())
            out = spec.execute([BatchInput(sid, tuple(range(100, 160)), 0)])[0]
            spec._drain([sid])
            request = [ProposalRequest(sid, out.token, spec.pos(sid))]
            for _ in range(5):
                spec.draft.propose(request, n_draft)
            start = time.perf_counter()
            for _ in range(60):
                spec.draft.propose(request, n_draft)
            results.setdefault(form, []).append(1e3 * (time.perf_counter() - start) / 60)
    return results


def main_path_share(artifact: Path, prompts: int, tokens: int, nodes: int) -> dict:
    """Greedy tree cycles on held-out prompts over the IOBinding backend on the CPU (the
    exported attention under the tree's mask, told it may verify trees: not bit for bit, which
    does not matter for counting): how many cycles' accepted path lies on the tree's main path
    (with only the main path drained behind the verify, as before 2026-12-03's third sitting,
    the others needed a second drain; now every row is), and tau."""
    import cellspec.runtime.dflash as dflash
    from cellspec.artifact import Manifest
    from cellspec.runtime.device import HostDevice
    from cellspec.runtime.ort_device import OrtDeviceBackend, device_limits, device_policy
    from cellspec.runtime.types import BatchInput, Sampling
    from cellspec.tokenizer import Tokenizer
    from tools.dflash_train.prompts import held_out_texts

    manifest = Manifest.load(artifact)
    backend = OrtDeviceBackend("ort-host", HostDevice(), ["CPUExecutionProvider"],
                               device_limits(manifest, 2), device_policy(manifest),
                               artifact / manifest.graphs["sample"], "as-exported")
    backend.exact_trees = True
    spec = dflash.DFlashExecutor.load(artifact, backend=backend, max_sessions=2,
                                      tree_nodes=nodes)
    tokenizer = Tokenizer.load(artifact, manifest)
    walk, counts = dflash.walk, {"cycles": 0, "on_main_path": 0}

    def counting(tree, drawn):
        path, burst = walk(tree, drawn)
        counts["cycles"] += 1
        counts["on_main_path"] += path == tree.main_path()[: len(path)]
        return path, burst

    dflash.walk = counting
    for text in held_out_texts(prompts):
        sid = spec.open_session()
        spec.set_sampling(sid, Sampling())
        out = spec.execute([BatchInput(sid, tuple(tokenizer.encode(text, True)), 0)])[0]
        pending, produced = out.token, 1
        while produced < tokens and pending not in tokenizer.eos_token_ids:
            out = spec.execute([BatchInput(sid, (pending,), spec.pos(sid))])[0]
            pending, produced = out.tokens[-1], produced + len(out.tokens)
        spec.close_session(sid)
    dflash.walk = walk
    return {**counts, "tau": round(spec.stats.tau, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    host = commands.add_parser("host")
    host.add_argument("--nodes", type=int, default=15)
    host.add_argument("--depth", type=int, default=15)
    block = commands.add_parser("block")
    block.add_argument("artifact", type=Path)
    block.add_argument("--n-draft", type=int, default=7)
    block.add_argument("--rounds", type=int, default=3)
    paths = commands.add_parser("paths")
    paths.add_argument("artifact", type=Path)
    paths.add_argument("--prompts", type=int, default=8)
    paths.add_argument("--tokens", type=int, default=64)
    paths.add_argument("--nodes", type=int, default=15)
    args = parser.parse_args()
    if args.command == "paths":
        print(main_path_share(args.artifact, args.prompts, args.tokens, args.nodes))
    elif args.command == "host":
        costs = host_costs(args.nodes, args.depth)
        print({name: round(us, 1) for name, us in costs.items()}, "us per call")
    else:
        costs = block_costs(args.artifact, args.n_draft, args.rounds)
        print({form: [round(ms, 3) for ms in times] for form, times in costs.items()},
              "ms per draft_block call")


if __name__ == "__main__":
    main()
