"""Offline: trees on the CPU with a threshold. Over the same recording as threshold_rules.py,
each cycle's tree grown best-first by the product of the draft's probabilities (a node's
children: its row's top 4, depth at most 7), at most BUDGET nodes and only nodes whose path
probability is >= t; prints the modelled speed-up (tau over a + b x (nodes + 1) steps), tau and
the mean nodes per budget and t.

    python bench/cpu-2026-12-04n/cpu_trees.py OUT.pkl A B
"""
import sys, pickle, heapq, numpy as np
S = pickle.load(open(sys.argv[1], "rb"))
a, b = float(sys.argv[2]), float(sys.argv[3])
def run(budget, t, depth=7, B=4):
    tot_tau = tot_cost = 0.0; nodes_sum = 0
    for top, probs, text, cat in S:
        # best-first by path probability; keep nodes with path prob >= t, at most budget
        heap = [(-probs[0, r], (r,)) for r in range(B)]
        heapq.heapify(heap); chosen = set()
        while heap and len(chosen) < budget:
            negp, path = heapq.heappop(heap)
            if -negp < t and chosen: break
            chosen.add(tuple(int(top[d, r]) for d, r in enumerate(path)))
            d = len(path)
            if d < depth:
                for r in range(B):
                    heapq.heappush(heap, (negp * probs[d, r], path + (r,)))
        acc = 0
        while acc < len(text) and tuple(text[:acc + 1]) in chosen: acc += 1
        tot_tau += acc + 1; tot_cost += a + b * (len(chosen) + 1); nodes_sum += len(chosen)
    n = len(S)
    return tot_tau / tot_cost, tot_tau / n, nodes_sum / n
for budget in (3, 4, 5, 6, 7):
    res = [(run(budget, t), t) for t in (0.0, 0.05, 0.1, 0.15, 0.2)]
    print(budget, "  ".join(f"t{t}: {r[0]:.3f} tau {r[1]:.2f} n {r[2]:.2f}" for r, t in res), flush=True)
