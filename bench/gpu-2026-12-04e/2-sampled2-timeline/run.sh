set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w3.sh $OUT/run.sh
ROOT=$PWD
W=/tmp/cellspec-gpu
python3 -m cellspec.plugins.build > /dev/null 2>&1
summary() { python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for r in rows:
    print(' ', 'spec' if r['speculation'] else 'plain', r['batch'], r['temperature'], round(r['tokens_per_s'], 1), r.get('tau'), 'round', r.get('round_ms'), 'host', round(r['host_probe_ms'], 2))
" $1; }
for k in 1 2; do
  echo "== sampled 0.7/0.9, 2 sessions, --speculate-sampled ($k)"
  CELLSPEC_CUDA_ATTENTION=cell timeout 120 python3 tools/gpu_bench.py smollm2 --dtype float16 \
    --draft $ROOT/cellspec/drafts/smollm2-135m-instruct --batches 2 --tokens 96 \
    --temperature 0.7 --top-p 0.9 --speculate-sampled --out $OUT/s2-$k --work $W > $OUT/s2-$k.log 2>&1
  summary $OUT/s2-$k.log
done
echo "== timeline, profiled"
python3 tools/cycle_timeline.py --draft cellspec/drafts/smollm2-135m-instruct --prompts 8 \
  --orders walk,walk --work $W --out $OUT/timeline.json --profile $OUT/profile 2>&1 | grep -v "plugin EP" | grep "^{"
