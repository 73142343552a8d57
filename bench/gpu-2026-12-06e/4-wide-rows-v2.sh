# 2026-12-06 (fifth sitting), second machine, call 1 after staging: row_wide_kernel v2 (4 stages of
# 2 chunks in dynamic shared memory; 4 or 2 tiles of 16 rows a warp), the plugin's choice per
# shape. The row-matmul tests, then each projection of shapes A and B at 128-2,048 rows with
# CELLSPEC_ROW_WIDE unset (the choice), 4, 2 and 0 (64-row tiles), one process each; then shape
# B's prompts with the choice and with 64-row tiles, alternating.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 200 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "row_matmul or prompts" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/tests.log
for v in choice 4 2 0; do s=$(date +%s)
  ( [ $v != choice ] && export CELLSPEC_ROW_WIDE=$v; timeout 60 python3 tools/gpu_bench.py projections --out $OUT/proj-$v --shapes A,B --rows 128,256,1024,2048 --repeat 4 --runs 5 > $OUT/proj-$v.log 2>&1 ); echo "wide=$v rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT <<'PY'
import json, sys
from pathlib import Path
rows = {}
for v in ("choice", "4", "2", "0"):
    for line in (Path(sys.argv[1]) / f"proj-{v}.log").read_text().splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows.setdefault((r["shape"], r["projection"], r["rows"]), {})[r["form"] if r["form"] == "cublas" else v] = r["us"]
for key, f in rows.items():
    print(*key, "us cublas %s choice %s m4 %s m2 %s tiles64 %s" % tuple(f.get(k) for k in ("cublas", "choice", "4", "2", "0")))
PY
for run in choice 0 choice 0; do s=$(date +%s)
  ( [ $run != choice ] && export CELLSPEC_ROW_WIDE=$run; CELLSPEC_CUDA_ATTENTION=cell timeout 100 python3 bench/gpu-2026-12-06d/prefill_b.py /tmp/pb wide-$run >> $OUT/prefill.jsonl 2>> $OUT/stderr.log ); echo "$run rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT/prefill.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["label"], r["kind"], r.get("tokens", r.get("context")), "ms %.2f best %.2f probe %.1f" % (r["ms"], r["best_ms"], r["probe_ms"]))
PY
