"""Offline: which rule for how many of a cycle's chain proposals to verify pays best on the CPU.
Reads draft_trees.py's recording (bench/cpu-2026-12-04/trees/rec.py ART 205 OUT.pkl: every greedy
cycle's top-8 draft ids and probabilities per block row and the text after the anchor), and a
cycle's cost in plain steps, a + b x verify rows. Prints the modelled speed-up over plain
decoding for fixed k, the running product of the draft's probabilities >= t (ort-cpu's rule),
that product of p^0.5 or p^0.75, each p >= t, and the product of calibrated acceptances
(fitted on half the cycles, scored on the other half), at most 7 proposals.

    python bench/cpu-2026-12-04n/threshold_rules.py OUT.pkl A B
"""
import sys, pickle, numpy as np
S = pickle.load(open(sys.argv[1], "rb"))
a, b = float(sys.argv[2]), float(sys.argv[3])   # cycle cost in plain steps: a + b * verify rows
CAP = 7
P = np.array([s[1][:, 0] for s in S])              # [cycles, 15] draft top prob per row
HIT = np.array([[s[0][d, 0] == (s[2][d] if d < len(s[2]) else -1) for d in range(15)] for s in S])
L = np.argmin(np.concatenate([HIT, np.zeros((len(S), 1), bool)], 1), axis=1)  # accepted chain len
print(len(S), "cycles; mean chain acceptance (cap 15)", L.mean() + 1)
def speed(k):
    k = np.clip(k, 1, CAP)
    tau = np.minimum(L, k) + 1
    return tau.mean() / (a + b * (k + 1)).mean(), tau.mean(), k.mean()
def leading(score, t):
    return np.maximum(1, (np.cumprod(score, 1)[:, :CAP] >= t).sum(1))
print("fixed k:", " ".join(f"{k}:{speed(np.full(len(S), k))[0]:.3f}" for k in range(1, 8)))
best = {}
for name, fn in [("product p", lambda t: leading(P, t)),
                 ("product sqrt p", lambda t: leading(np.sqrt(P), t)),
                 ("product p^0.75", lambda t: leading(P ** 0.75, t)),
                 ("each p >= t", lambda t: np.maximum(1, np.cumprod(P[:, :CAP] >= t, 1).sum(1)))]:
    rows = []
    for t in [0.02, 0.05, 0.08, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7]:
        s, tau, k = speed(leading(P, 0) if False else fn(t))
        rows.append((s, t, tau, k))
    s, t, tau, k = max(rows)
    print(f"{name:16s} best t={t}: speed {s:.3f} tau {tau:.3f} k {k:.2f};  t=0.2: " +
          " ".join(f"{r[0]:.3f}" for r in rows if r[1] == 0.2))
# calibrated: fit q(d, p-bin) = P(hit d | hits before) on even cycles, evaluate on odd ones
nb = 10
def fit(idx):
    H = np.zeros((15, nb)); N = np.zeros((15, nb))
    for i in idx:
        for d in range(15):
            pb = min(int(P[i, d] * nb), nb - 1)
            N[d, pb] += 1; H[d, pb] += HIT[i, d]
            if not HIT[i, d]: break
    return (H + 1) / (N + 2)
ev, od = np.arange(0, len(S), 2), np.arange(1, len(S), 2)
for fitset, evalset in ((ev, od), (od, ev)):
    q = fit(fitset)
    Q = q[np.arange(15)[None, :], np.minimum((P * nb).astype(int), nb - 1)]
    global L_all
    Lsave, Psave = L, P
    rows = []
    for t in [0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6]:
        k = np.maximum(1, (np.cumprod(Q[evalset], 1)[:, :CAP] >= t).sum(1))
        kk = np.clip(k, 1, CAP); tau = np.minimum(L[evalset], kk) + 1
        rows.append((tau.mean() / (a + b * (kk + 1)).mean(), t, tau.mean(), kk.mean()))
    base = []
    for t in [0.1, 0.15, 0.2, 0.25, 0.3]:
        k = np.maximum(1, (np.cumprod(P[evalset], 1)[:, :CAP] >= t).sum(1))
        tau = np.minimum(L[evalset], k) + 1
        base.append((tau.mean() / (a + b * (k + 1)).mean(), t, tau.mean(), k.mean()))
    print("calibrated best", max(rows), " product-p best", max(base), " product 0.2", [r for r in base if r[1] == 0.2])
np.set_printoptions(precision=2, suppress=True)
print("q(d, pbin) on all:\n", fit(np.arange(len(S)))[:8])
