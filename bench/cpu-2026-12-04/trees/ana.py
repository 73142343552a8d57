import sys, pickle, numpy as np, collections
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from cellspec.runtime.trees import grow_tree
from tools.draft_trees import accepted
S = pickle.load(open(sys.argv[1], "rb"))
B = 4
def paths_of(g):
    paths = {0: ()}
    for row in range(1, g.rows):
        paths[row] = paths[int(g.parents[row])] + (int(g.tokens[row - 1]),)
    return {p for r, p in paths.items() if r}
def tau(samples, lpfun, nodes=15):
    L = []
    for top, probs, text, cat in samples:
        with np.errstate(divide="ignore"):
            lp = lpfun(top[:, :B], np.log(probs[:, :B]))
        g = grow_tree(top[:, :B], lp, nodes)
        L.append(accepted(paths_of(g), text) + 1)
    return np.mean(L)
# conditional acceptance table: depth, rank, off-count -> (hits, tries)
def table(samples):
    T = collections.defaultdict(lambda: [0, 0])
    for top, probs, text, cat in samples:
        off = 0
        for d in range(min(len(text), 15)):
            ranks = np.flatnonzero(top[d, :B] == text[d])
            for r in range(B):
                T[(d, r, min(off, 2))][1] += 1
                T[(d, r, min(off, 2))][0] += int(ranks.size > 0 and ranks[0] == r)
            if ranks.size == 0: break
            off += int(ranks[0] > 0)
    return T
rng = np.random.default_rng(0)
idx = np.arange(len(S))
# split by prompt order halves (samples are in prompt order)
half = len(S) // 2
A, Bs = S[:half], S[half:]
print(len(S), "cycles")
print("base tau all", tau(S, lambda t, lp: lp), "A", tau(A, lambda t, lp: lp), "B", tau(Bs, lambda t, lp: lp))
T = table(A)
for off in range(3):
    print("off", off, " ".join(f"d{d}:" + ",".join(f"{T[(d,r,off)][0]/max(T[(d,r,off)][1],1):.2f}" for r in range(B)) for d in range(0, 15, 2)))
# mean draft prob per (d, r) for comparison
P = np.array([s[1][:, :B] for s in A])
print("mean p", " ".join(f"d{d}:" + ",".join(f"{P[:, d, r].mean():.2f}" for r in range(B)) for d in range(0, 15, 2)))
# calibration by p-bucket and depth: acc(d, pbin)
def fit(samples, nb=10, dbins=(0, 1, 2, 4, 8, 15)):
    H = np.zeros((len(dbins) - 1, nb)); N = np.zeros_like(H)
    for top, probs, text, cat in samples:
        for d in range(min(len(text), 15)):
            db = np.searchsorted(dbins, d, side="right") - 1
            for r in range(B):
                pb = min(int(probs[d, r] * nb), nb - 1)
                N[db, pb] += 1; H[db, pb] += int(top[d, r] == text[d])
            if text[d] not in top[d, :B]: break
    return (H + 1) / (N + 2), dbins, nb
acc, dbins, nb = fit(A)
np.set_printoptions(precision=2, suppress=True)
print(acc)
def cal(t, lp, acc=acc, dbins=dbins, nb=nb):
    p = np.exp(lp); out = np.empty_like(lp)
    for d in range(lp.shape[0]):
        db = np.searchsorted(dbins, d, side="right") - 1
        pb = np.minimum((p[d] * nb).astype(int), nb - 1)
        out[d] = np.log(acc[db, pb])
    # keep rows monotone (best first): cumulative min
    out = np.minimum.accumulate(out, axis=1)
    return out
print("calibrated tau B", tau(Bs, cal))
for nodes in (7, 15, 31):
    print(nodes, "base", tau(Bs, lambda t, lp: lp, nodes), "cal", tau(Bs, cal, nodes))
# simple per-depth offsets: lp + c*d  ... try depth bonus
for c in (-0.1, 0.0, 0.1, 0.2, 0.3):
    print("depth bonus", c, tau(Bs, lambda t, lp, c=c: lp + np.minimum(0, c) + 0*lp, 15) if False else tau(Bs, lambda t, lp, c=c: np.minimum(lp + c, 0), 15))
