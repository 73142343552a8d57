import sys, pickle, argparse, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from pathlib import Path
from tools import draft_trees as dt
art, prompts, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
args = argparse.Namespace(artifact=Path(art), prompts=prompts, tokens=128, n_draft=15, top=8,
    tree_depth=15, chains="3,7", trees="15", threads=2, temperature=0.0, top_p=1.0, by_category=False)
t = time.time()
samples = dt.record(args)
pickle.dump(samples, open(out, "wb"))
print(len(samples), "cycles", time.time() - t, "s")
