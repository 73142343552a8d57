"""Offline: a cycle's chain (the draft's proposals cut at a running probability of 0.2, at most
7) with tokens looked up in the text appended, on record_cycles.py's recording; each recorded
cycle is a sample of a cycle at its anchor (the greedy text is the same whatever is proposed).

    python bench/cpu-2026-12-05/lookup_offline.py OUT.pkl

Prints, per answer length: tau, proposals a cycle and the modelled speedup (tau over a cycle's
cost in steps: 1.21 + 0.13 a proposal for int4, 1.2 + 0.045 for float32, from
tools/profile_widths.py) for lookups of up to m tokens after a match of n_min..n_max tokens;
then, at 256 tokens, how often looked-up tokens are accepted by the match's length."""
import collections
import pickle
import sys

res = pickle.load(open(sys.argv[1], "rb"))


def lookup(ctx, n_min, n_max, m):
    for n in range(n_max, n_min - 1, -1):
        if len(ctx) < n + 1:
            continue
        suf = ctx[len(ctx) - n:]
        for s in range(len(ctx) - n - 1, -1, -1):
            if ctx[s:s + n] == suf:
                return ctx[s + n: s + n + m], n
    return [], 0


def confident(probs, thr=0.2, cap=7):
    c, k = 1.0, 0
    for p in probs[:cap]:
        c *= p
        if c < thr:
            break
        k += 1
    return k


def cycles(limit):
    for r in res:
        gen, prompt, pos = r["gen"][:limit], list(r["prompt"]), 1
        for top, probs, burst in r["cycles"]:
            if pos >= len(gen):
                break
            yield prompt, gen, pos, top[:, 0].tolist(), confident(probs[:, 0].tolist())
            pos += burst


def accepted(chain, gen, pos):
    a = 0
    while a < len(chain) and pos + a < len(gen) and chain[a] == gen[pos + a]:
        a += 1
    return a


def sim(m, n_min, n_max, costs, limit, cap=11):
    toks = cyc = rows = 0
    for prompt, gen, pos, draft, k in cycles(limit):
        chain = draft[:k]
        if m:
            chain = chain + lookup(prompt + gen[:pos] + chain, n_min, n_max, min(m, cap - k))[0]
        toks += accepted(chain, gen, pos) + 1
        cyc += 1
        rows += len(chain)
    tau, per = toks / cyc, rows / cyc
    return tau, per, tau / (costs[0] + costs[1] * per)


for limit in (96, 128, 256):
    for costs, name in (((1.21, 0.13), "int4"), ((1.2, 0.045), "f32")):
        b = sim(0, 4, 8, costs, limit)
        out = [f"{limit} {name} none {b[0]:.2f}/{b[1]:.2f}/{b[2]:.3f}"]
        for n_min, n_max, m in ((2, 8, 8), (4, 8, 8), (6, 8, 8), (8, 8, 8), (6, 16, 8),
                                (4, 8, 4)):
            t = sim(m, n_min, n_max, costs, limit)
            out.append(f"n{n_min}-{n_max} m{m} {t[0]:.2f}/{t[1]:.2f}/{t[2]:.3f}")
        print("  ".join(out))

by_n = collections.defaultdict(lambda: [0, 0, 0, 0])
for prompt, gen, pos, draft, k in cycles(256):
    chain = draft[:k]
    ext, n = lookup(prompt + gen[:pos] + chain, 4, 8, 8)
    full = accepted(chain, gen, pos) == k
    e = accepted(ext, gen[pos + k:], 0) if full else 0
    st = by_n[n]
    st[0] += 1
    st[1] += full
    st[2] += len(ext)
    st[3] += e
for n in sorted(by_n):
    c, f, p, a = by_n[n]
    print(f"match {n}: {c} cycles, draft's all accepted {f / c:.2f}, looked up {p / c:.2f} a "
          f"cycle, accepted {a / max(p, 1):.2f} of them")
