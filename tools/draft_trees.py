"""What tau a cycle would reach if it verified more than the draft's argmax chain: several
candidate paths (each its own row of the step), or a tree of proposals that shares prefixes.
Offline: acceptance is exact (the target's text is known), costs are only counted as rows.

Runs speculative decoding (greedy or --temperature, one prompt at a time, --n-draft proposals
a cycle, no threshold) on held-out prompts and records, for every cycle, the draft's top --top
ids and probabilities at each block row (a softmax over its proposal vocabulary) and the text
that followed the cycle's anchor. Then, over those cycles, for each strategy: tau = mean over cycles
of (the longest prefix of the followed text that the strategy verified) + 1.

- chain B: the argmax chain of B proposals (B + 1 verify rows: what cellspec verifies today).
- paths k x n: k paths of n proposals, each the argmax path with one row changed to its 2nd-4th
  choice, added one at a time by the most expected accepted length under the rows'
  distributions (k x (n + 1) rows).
- tree B: at most B nodes grown best-first from the anchor by the product of the rows'
  probabilities (a node's children: its row's top TOP_K, or its first C with --tree-choices:
  'tree B:C'), depth at most --tree-depth (B + 1 rows
  if a row could see only its ancestors; as paths of the step, leaves x (deepest + 1)).

    python tools/draft_trees.py ARTIFACT [--prompts 48] [--tokens 128] [--n-draft 15]
        [--temperature 0.7 --top-p 0.9] [--by-category] [--chains 3,7] [--trees 7,15,31]
        [--tree-choices 4]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("artifact", type=Path, help="an artifact with a DFlash draft")
    parser.add_argument("--prompts", type=int, default=48, help="held-out prompts")
    parser.add_argument("--tokens", type=int, default=128, help="most tokens per answer")
    parser.add_argument("--n-draft", type=int, default=15, help="block rows recorded a cycle")
    parser.add_argument("--top", type=int, default=8, help="ids recorded per block row")
    parser.add_argument("--tree-depth", type=int, default=15)
    parser.add_argument("--chains", default="3,7", help="chain lengths to report (and "
                        "--n-draft's)")
    parser.add_argument("--trees", default="7,15,31", help="tree sizes (nodes) to report")
    parser.add_argument("--tree-choices", default=None, help="also trees from each row's "
                        "first C choices, for each C of this list (reported as 'tree B:C'; "
                        "the plain 'tree B' takes all of the runtime's TOP_K)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="> 0: answers drawn (seed 5, --top-p); a tree's acceptance follows "
                        "the drawn text, as the per-position draws make it exact")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--by-category", action="store_true",
                        help="also tau per prompt category (chain 7 and the trees)")
    args = parser.parse_args()
    from cellspec.artifact import TOP_K

    if args.prompts < 1 or args.tokens < 1 or args.top < TOP_K or args.tree_depth < 1:
        parser.error(f"--prompts and --tokens must be >= 1, --top >= {TOP_K}, --tree-depth >= 1")
    try:
        args.tree_choices = [int(c) for c in args.tree_choices.split(",")] if (
            args.tree_choices) else []
    except ValueError:
        parser.error(f"--tree-choices {args.tree_choices!r}: expected ints, e.g. 4,8")
    if not all(1 <= c <= args.top for c in args.tree_choices):
        parser.error(f"--tree-choices: each in 1..--top ({args.top})")
    return args


def proposal_ids(artifact: Path) -> np.ndarray | None:
    """The ids the draft block's logits cover, ascending (None: the whole vocabulary)."""
    import onnx
    from onnx import numpy_helper

    from cellspec.export.draft import PROPOSAL_IDS

    model = onnx.load(str(artifact / "draft_block.onnx"), load_external_data=False)
    for tensor in model.graph.initializer:
        if tensor.name == PROPOSAL_IDS:
            return numpy_helper.to_array(tensor, base_dir=str(artifact)).astype(np.int64)
    for node in model.graph.node:  # a Constant node
        if node.op_type == "Constant" and node.output[0] == PROPOSAL_IDS:
            return numpy_helper.to_array(node.attribute[0].t).astype(np.int64)
    return None


def record_cycles(llm, artifact: Path, top: int) -> list[list]:
    """Hooks `llm`'s speculation so that each cycle appends [top ids [n, top], their
    probabilities [n, top]] and then the burst it committed; returns that list of cycles.
    The LLM must speculate in chains at batch 1 (one session a cycle)."""
    from cellspec import artifact as names

    executor, draft = llm.executor, llm.executor.draft
    ids = proposal_ids(artifact)
    cycles, last = [], {}
    run = draft._run

    def keep_logits(engine, method, count, feeds, outputs, *rest, **options):
        out = run(engine, method, count, feeds, outputs, *rest, **options)
        last["logits"] = out.get(names.LOGITS)
        return out

    class Recorder:
        def propose(self, requests, n_draft):
            proposals, _ = draft._propose_chunk(requests, n_draft, confidence=True)
            logits = np.asarray(last["logits"][: n_draft], dtype=np.float64)
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            best = np.argsort(-p, axis=1, kind="stable")[:, :top]
            cycles.append([best if ids is None else ids[best], np.take_along_axis(p, best, 1)])
            return proposals

    draft._run = keep_logits
    executor.proposer = Recorder()
    speculate = executor.speculate

    def keep_burst(items):
        bursts = speculate(items)
        cycles[-1].append(bursts[0])
        return bursts

    executor.speculate = keep_burst
    return cycles


def record(args) -> list[tuple[np.ndarray, np.ndarray, list[int], str]]:
    """(top ids [n, top], their probabilities [n, top], the text after the anchor, the prompt's
    category) a cycle."""
    from cellspec.llm import LLM, SamplingParams
    from tools.dflash_train.prompts import held_out_prompts

    llm = LLM(args.artifact, max_sessions=1, threads=args.threads, speculation=True,
              n_draft=args.n_draft, draft_threshold=0)
    cycles = record_cycles(llm, args.artifact, args.top)
    samples = []
    for prompt in held_out_prompts(args.prompts):
        start = len(cycles)
        llm.generate([prompt.text], SamplingParams(max_tokens=args.tokens, seed=5,
                                                   temperature=args.temperature,
                                                   top_p=args.top_p))
        followed = list(itertools.chain.from_iterable(c[2] for c in cycles[start:]))
        offset = 0
        for top, probs, burst in cycles[start:]:
            samples.append((top, probs, followed[offset: offset + len(top)], prompt.category))
            offset += len(burst)
    return samples


def accepted(paths: set[tuple[int, ...]], text: list[int]) -> int:
    """The longest prefix of `text` that is in `paths` (a set closed under prefixes)."""
    a = 0
    while a < len(text) and tuple(text[: a + 1]) in paths:
        a += 1
    return a


def prefixes(path: list[int]) -> set[tuple[int, ...]]:
    return {tuple(path[: k]) for k in range(1, len(path) + 1)}


def chain(top: np.ndarray, n: int) -> set[tuple[int, ...]]:
    return prefixes([int(t) for t in top[:n, 0]])


def one_change_paths(top: np.ndarray, probs: np.ndarray, k: int, n: int) -> set[tuple[int, ...]]:
    """k paths: the argmax path, then each the argmax path with one row's 2nd-4th choice, added
    by the most expected accepted length (rows independent) the set gains."""
    def mass(node: tuple[int, ...]) -> float:
        value = 1.0
        for row, token in enumerate(node):
            where = np.flatnonzero(top[row] == token)
            value *= probs[row, where[0]] if where.size else 0.0
        return value

    argmax = [int(t) for t in top[:n, 0]]
    chosen = prefixes(argmax)
    candidates = [argmax[:row] + [int(top[row, r])] + argmax[row + 1:]
                  for row in range(n) for r in range(1, 4)]
    for _ in range(k - 1):
        best = max(candidates, key=lambda c: sum(mass(q) for q in prefixes(c) - chosen))
        chosen |= prefixes(best)
        candidates.remove(best)
    return chosen


def tree(top: np.ndarray, probs: np.ndarray, budget: int, depth: int,
         choices: int | None = None) -> set[tuple[int, ...]]:
    """At most `budget` nodes, best first by the product of the rows' probabilities (each
    node's children its row's first `choices` (default: the runtime's TOP_K), at most `depth`
    deep): the runtime's tree (cellspec.runtime.trees.grow_tree), as the token paths of its
    nodes."""
    from cellspec.artifact import TOP_K
    from cellspec.runtime.trees import grow_tree

    rows, k = min(depth, len(top)), choices or TOP_K
    with np.errstate(divide="ignore"):  # a probability of 0 is a logp of -inf: never first
        grown = grow_tree(top[:rows, :k], np.log(probs[:rows, :k]), budget)
    paths: dict[int, tuple[int, ...]] = {0: ()}
    for row in range(1, grown.rows):
        paths[row] = paths[int(grown.parents[row])] + (int(grown.tokens[row - 1]),)
    return {path for row, path in paths.items() if row}


def as_rectangle(nodes: set[tuple[int, ...]]) -> int:
    """Rows of the tree verified as paths of the step: leaves x (deepest + 1)."""
    leaves = [n for n in nodes if not any(len(m) > len(n) and m[: len(n)] == n for m in nodes)]
    return len(leaves) * (max(len(n) for n in nodes) + 1)


def main() -> None:
    args = parse_args()
    samples = record(args)
    n_max = min(len(top) for top, *_ in samples)
    how = (f"temperature {args.temperature}, top_p {args.top_p}" if args.temperature
           else "greedy")
    print(f"{args.artifact}: {len(samples)} cycles, {args.prompts} held-out prompts, {how}")
    print(f"{'strategy':<22} {'verify rows':>12} {'tau':>6}")

    by_category: dict[str, dict[str, float]] = {}

    def report(name: str, build, rows) -> None:
        sets = [build(top, probs) for top, probs, *_ in samples]
        lengths = np.array([accepted(s, sample[2]) for s, sample in zip(sets, samples)]) + 1
        shown = rows if isinstance(rows, int) else f"{np.mean([rows(s) for s in sets]):.1f}"
        print(f"{name:<22} {shown:>12} {lengths.mean():6.3f}", flush=True)
        categories = np.array([sample[3] for sample in samples])
        for category in dict.fromkeys(categories.tolist()):
            by_category.setdefault(category, {})[name] = lengths[categories == category].mean()

    chains = {int(n) for n in args.chains.split(",")} | {n_max}
    for n in sorted(chains & set(range(1, n_max + 1))):
        report(f"chain {n}", lambda top, probs, n=n: chain(top, n), n + 1)
    for k, n in ((2, 7), (4, 7), (4, 3)):
        if n <= n_max:
            report(f"paths {k} x {n}", lambda top, probs, k=k, n=n:
                   one_change_paths(top, probs, k, n), k * (n + 1))
    depth = min(args.tree_depth, n_max)
    for budget in (int(b) for b in args.trees.split(",")):
        report(f"tree {budget} (as a tree)", lambda top, probs, b=budget:
               tree(top, probs, b, depth), budget + 1)
        report(f"tree {budget} (as paths)", lambda top, probs, b=budget:
               tree(top, probs, b, depth), as_rectangle)
        for c in args.tree_choices:
            report(f"tree {budget}:{c} (as a tree)", lambda top, probs, b=budget, c=c:
                   tree(top, probs, b, depth, c), budget + 1)
    if args.by_category:  # tau per prompt category of the chain of 7 and the trees
        columns = [c for c in ("chain 7", "tree 7 (as a tree)", "tree 15 (as a tree)",
                               "tree 31 (as a tree)") if c in next(iter(by_category.values()))]
        print(f"{'category':<14}" + "".join(f"{c.split(' (')[0]:>10}" for c in columns))
        for category, taus in by_category.items():
            print(f"{category:<14}" + "".join(f"{taus[c]:10.3f}" for c in columns))


if __name__ == "__main__":
    main()
