set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w5.sh $OUT/run.sh
ROOT=$PWD
W=/tmp/cellspec-gpu
python3 -m cellspec.plugins.build > /dev/null 2>&1
summary() { python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for r in rows:
    print(' ', 'spec' if r['speculation'] else 'plain', r['batch'], r['temperature'], round(r['tokens_per_s'], 1), r.get('tau'), 'round', r.get('round_ms'), 'host', round(r['host_probe_ms'], 2))
" $1; }
for k in 1 2 3; do
  echo "== sampled 0.7/0.9, --speculate-sampled ($k)"
  CELLSPEC_CUDA_ATTENTION=cell timeout 150 python3 tools/gpu_bench.py smollm2 --dtype float16 \
    --draft $ROOT/cellspec/drafts/smollm2-135m-instruct --batches 1,2,3,4 --tokens 96 \
    --temperature 0.7 --top-p 0.9 --speculate-sampled --out $OUT/sampled-$k --work $W > $OUT/sampled-$k.log 2>&1
  summary $OUT/sampled-$k.log
  echo "== greedy ($k)"
  CELLSPEC_CUDA_ATTENTION=cell timeout 150 python3 tools/gpu_bench.py smollm2 --dtype float16 \
    --draft $ROOT/cellspec/drafts/smollm2-135m-instruct --batches 1,2,4 --tokens 96 \
    --out $OUT/greedy-$k --work $W > $OUT/greedy-$k.log 2>&1
  summary $OUT/greedy-$k.log
done
