import sys, pickle, heapq, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from tools.draft_trees import accepted
S = pickle.load(open(sys.argv[1], "rb"))
B = 4
half = len(S) // 2
A, Bs = S[:half], S[half:]
DB = (0, 1, 2, 3, 5, 8, 15)
NB = 10; NO = 3
def dbin(d): return np.searchsorted(DB, d, side="right") - 1
def fit(samples):
    H = np.zeros((len(DB) - 1, NO, NB)); N = np.zeros_like(H)
    for top, probs, text, cat in samples:
        off = 0
        for d in range(min(len(text), 15)):
            for r in range(B):
                pb = min(int(probs[d, r] * NB), NB - 1)
                N[dbin(d), min(off, NO - 1), pb] += 1
                H[dbin(d), min(off, NO - 1), pb] += int(top[d, r] == text[d])
            w = np.flatnonzero(top[d, :B] == text[d])
            if w.size == 0: break
            off += int(w[0] > 0)
    acc = (H + 0.5) / (N + 1)
    # monotone in p (isotonic-ish: cumulative max along p)
    acc = np.maximum.accumulate(acc, axis=2)
    return np.log(acc)
def grow(top, probs, nodes, L):
    # L[dbin, off, pbin] log acc; nodes (depth, choice, parent) best first
    depth_limit = top.shape[0]
    def s(d, ch, off):  # d is 1-based depth
        return L[dbin(d - 1), min(off, NO - 1), min(int(probs[d - 1, ch] * NB), NB - 1)]
    heap = [(-s(1, 0, 0), 0, 1, 0, 0)]
    order = 1; paths = [()]; score = [0.0]; offs = [0]; out = set()
    while heap and len(paths) <= nodes:
        neg, _, d, ch, p = heapq.heappop(heap)
        row = len(paths)
        path = paths[p] + (int(top[d - 1, ch]),)
        paths.append(path); score.append(-neg); offs.append(offs[p] + (ch > 0)); out.add(path)
        if ch + 1 < B:
            heapq.heappush(heap, (-(score[p] + s(d, ch + 1, offs[p])), order, d, ch + 1, p)); order += 1
        if d < depth_limit:
            heapq.heappush(heap, (neg - s(d + 1, 0, offs[row]), order, d + 1, 0, row)); order += 1
    return out
def tau(samples, L, nodes):
    return np.mean([accepted(grow(t, p, nodes, L), x) + 1 for t, p, x, c in samples])
Lid = np.log(np.maximum((np.arange(NB) + 0.5) / NB, 1e-9))[None, None, :].repeat(len(DB) - 1, 0).repeat(NO, 1)
from cellspec.runtime.trees import grow_tree
def base(samples, nodes):
    out = []
    for t, p, x, c in samples:
        g = grow_tree(t[:, :B], np.log(np.maximum(p[:, :B], 1e-30)), nodes)
        paths = {0: ()}
        for row in range(1, g.rows):
            paths[row] = paths[int(g.parents[row])] + (int(g.tokens[row - 1]),)
        out.append(accepted(set(list(paths.values())[1:]), x) + 1)
    return np.mean(out)
LA = fit(A); LB = fit(Bs)
np.set_printoptions(precision=2, suppress=True)
print(np.exp(LA[:, :, :]))
for nodes in (7, 15, 31):
    print(nodes, "base A/B", round(base(A, nodes), 3), round(base(Bs, nodes), 3),
          "| fit A -> B", round(tau(Bs, LA, nodes), 3), "| fit B -> A", round(tau(A, LB, nodes), 3))
