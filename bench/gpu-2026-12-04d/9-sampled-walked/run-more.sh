set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
ROOT=$PWD
W=/tmp/cellspec-gpu
python3 -m cellspec.plugins.build > /dev/null 2>&1
summary() { python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for r in rows:
    print(' ', 'spec' if r['speculation'] else 'plain', r['batch'], r['temperature'], round(r['tokens_per_s'], 1), r.get('tau'), 'round', r.get('round_ms'), 'host', round(r['host_probe_ms'], 2))
" $1; }
for k in 4 5; do
  for side in new base; do
    echo "== sampled 0.7/0.9, 1 session: $side ($k)"
    if [ $side = base ]; then cd .gpu/base; else cd $ROOT; fi
    CELLSPEC_CUDA_ATTENTION=cell timeout 90 python3 tools/gpu_bench.py smollm2 --dtype float16 \
      --draft $ROOT/cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 96 \
      --temperature 0.7 --top-p 0.9 --out $OUT/$side-$k --work $W > $OUT/$side-$k.log 2>&1
    cd $ROOT
    summary $OUT/$side-$k.log
  done
done
