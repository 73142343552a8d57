import sys, pickle, numpy as np
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from tools.draft_trees import accepted
from cellspec.runtime.trees import grow_tree
S = pickle.load(open(sys.argv[1], "rb"))
def base(samples, nodes, B):
    out = []
    for t, p, x, c in samples:
        g = grow_tree(t[:, :B], np.log(np.maximum(p[:, :B], 1e-30)), nodes)
        paths = {0: ()}
        for row in range(1, g.rows):
            paths[row] = paths[int(g.parents[row])] + (int(g.tokens[row - 1]),)
        out.append(accepted(set(list(paths.values())[1:]), x) + 1)
    return np.mean(out)
for B in (2, 3, 4, 6, 8):
    print(B, [round(base(S, n, B), 3) for n in (7, 15, 31)])
# upper bound: oracle with top-B in tree space
