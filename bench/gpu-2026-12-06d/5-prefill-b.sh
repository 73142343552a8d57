# 2026-12-06 (fourth sitting), call 5 after staging: a large model's prompts under each
# attention mode (prefill_b.py: shape B, 8 Qwen3-8B-shaped layers, random float16 weights,
# prompts of 256-2,000 tokens in pieces of 256, and one-token steps after 1,024), decomposed
# and cell alternating, one process each.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
for run in decomposed cell decomposed cell; do s=$(date +%s)
  CELLSPEC_CUDA_ATTENTION=$run timeout 150 python3 bench/gpu-2026-12-06d/prefill_b.py /tmp/pb $run >> $OUT/prefill.jsonl 2>> $OUT/stderr.log; echo "$run rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT/prefill.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):  # the export's line
        continue
    r = json.loads(line)
    print(r["label"], r["kind"], r.get("tokens", r.get("context")), "ms %.2f best %.2f probe %.1f" % (r["ms"], r["best_ms"], r["probe_ms"]))
PY
grep -v "No registered plugin EP" $OUT/stderr.log | tail -5
