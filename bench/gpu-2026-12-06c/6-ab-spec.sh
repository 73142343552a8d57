# 2026-12-06 (third sitting): the round's host cuts (this checkout, "cut") against main before
# them (.gpu/base, "base"), speculative decoding alone, one process per run, the arms strictly
# alternating (ab_spec.py: blocks of 16 held-out prompts, each after a host probe), so that the
# host's swings (its probe 3.4-6.7 ms between and within runs on this sitting's H100) fall on
# both arms alike. PAIRS: how many runs of each arm (default 10).
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
ROOT=$PWD; ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
nvidia-smi --query-gpu=name --format=csv,noheader
[ -n "${BUILD:-}" ] && { s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; }
[ -f $ART/manifest.json ] || { s=$(date +%s); timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 32 --prompts 2 --paired --work /tmp/cellspec-gpu --out $OUT/export > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"; }
for i in $(seq 1 ${PAIRS:-10}); do
  if [ $((i % 2)) = 1 ]; then arms="cut base"; else arms="base cut"; fi
  for arm in $arms; do
    case $arm in base) dir=.gpu/base;; *) dir=.;; esac
    (cd $dir && timeout 60 python3 $ROOT/bench/gpu-2026-12-06c/ab_spec.py $ART $arm ${BLOCKS:-3} ${PER:-16} 2>>$OUT/stderr.log >> $OUT/ab.jsonl) || echo "$arm $i failed"
  done
done
python3 - $OUT/ab.jsonl <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for arm in ("cut", "base"):
    r = [x for x in rows if x["arm"] == arm]
    fast = [x["tokens_per_s"] for x in r if x["probe_ms"] < 4.5]
    slow = [x["tokens_per_s"] for x in r if x["probe_ms"] >= 4.5]
    print(arm, "blocks", len(r), "tok/s mean %.0f median %.0f" % (statistics.mean(x["tokens_per_s"] for x in r), statistics.median(x["tokens_per_s"] for x in r)),
          "| probe<4.5: n %d mean %.0f" % (len(fast), statistics.mean(fast) if fast else 0),
          "| probe>=4.5: n %d mean %.0f" % (len(slow), statistics.mean(slow) if slow else 0),
          "| round ms median %.3f" % statistics.median(x["round_ms"] for x in r))
PY
