# 2026-12-06 (fifth sitting), call 2: shape B's prompts and decode steps with CellAttention (the
# default), RowMatMul's prompt rows on the wide tiles (CELLSPEC_ROW_WIDE=1) and on the 64-row
# tiles before them (=0), alternating, one process each (bench/gpu-2026-12-06d/prefill_b.py).
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
for run in wide1 wide0 wide1 wide0; do s=$(date +%s)
  mode=cell; [ $run = decomposed ] && mode=decomposed
  CELLSPEC_CUDA_ATTENTION=$mode CELLSPEC_ROW_WIDE=${run#wide} timeout 130 python3 bench/gpu-2026-12-06d/prefill_b.py /tmp/pb $run >> $OUT/prefill.jsonl 2>> $OUT/stderr.log; echo "$run rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT/prefill.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    print(r["label"], r["kind"], r.get("tokens", r.get("context")), "ms %.2f best %.2f probe %.1f" % (r["ms"], r["best_ms"], r["probe_ms"]))
PY
grep -v "No registered plugin EP" $OUT/stderr.log | tail -5
