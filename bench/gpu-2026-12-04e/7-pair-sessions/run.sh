set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w10.sh $OUT/run.sh
W=/tmp/cellspec-gpu
summary() { python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for r in rows:
    print(' ', 'spec' if r['speculation'] else 'plain', r['batch'], r['temperature'], round(r['tokens_per_s'], 1), r.get('tau'), 'round', r.get('round_ms'), 'host', round(r['host_probe_ms'], 2))
" $1; }
echo "== greedy 2,4 sessions"
CELLSPEC_CUDA_ATTENTION=cell timeout 60 python3 tools/gpu_bench.py smollm2 --dtype float16 \
  --draft cellspec/drafts/smollm2-135m-instruct --batches 2,4 --tokens 96 --out $OUT/greedy --work $W > $OUT/greedy.log 2>&1
summary $OUT/greedy.log
echo "== sampled 1,2,3 sessions (LLM defaults: at most 3 speculate sampled)"
CELLSPEC_CUDA_ATTENTION=cell timeout 70 python3 tools/gpu_bench.py smollm2 --dtype float16 \
  --draft cellspec/drafts/smollm2-135m-instruct --batches 1,2,3 --tokens 96 --temperature 0.7 --top-p 0.9 \
  --out $OUT/sampled --work $W > $OUT/sampled.log 2>&1
summary $OUT/sampled.log
echo "== steps A, B"
CELLSPEC_CUDA_ATTENTION=cell timeout 60 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 \
  --out $OUT/steps --work $W 2>&1 | grep '^{' | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(' ', r['shape'], r['batch'], round(r['step_ms'], 3), 'x floor', round(r['x_floor'], 2))"
