# 2026-12-06 (fifth sitting), call 1 after staging (with .gpu/fin's install): row_wide_kernel,
# RowMatMul's tiles for a prompt's rows. The row-matmul tests (bit-for-bit invariance across row
# counts), then each projection of shapes A and B at 256-2,048 rows by cuBLAS and by RowMatMul,
# with CELLSPEC_ROW_WIDE=1 (the wide tiles) and =0 (the 64-row tiles before them), one process each.
# (The first version, 1-wide-rows/: one kernel, 3 stages of one chunk, 128 rows a block.)
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 200 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "row_matmul or prompts" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/tests.log
for v in 1 0; do s=$(date +%s)
  CELLSPEC_ROW_WIDE=$v timeout 100 python3 tools/gpu_bench.py projections --out $OUT/proj-$v --shapes A,B --rows 256,1024,2048 --repeat 4 --runs 5 > $OUT/proj-$v.log 2>&1; echo "wide=$v rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT <<'PY'
import json, sys
from pathlib import Path
rows = {}
for v in ("1", "0"):
    for line in (Path(sys.argv[1]) / f"proj-{v}.log").read_text().splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows.setdefault((r["shape"], r["projection"], r["rows"]), {})[r["form"] if r["form"] == "cublas" else f"row{v}"] = r["us"]
for key, forms in rows.items():
    print(*key, "us cublas %s wide %s tiles64 %s" % (forms.get("cublas"), forms.get("row1"), forms.get("row0")))
PY
