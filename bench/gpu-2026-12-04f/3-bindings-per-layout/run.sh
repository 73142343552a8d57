source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
summ() { grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['speculation'], r.get('order'), r['batch'], round(r['tokens_per_s'],1), r.get('tau'), r.get('round_ms'), r.get('host_probe_ms'), {k:(v['calls'],round(v['ms_per_call'],3)) for k,v in r['ms_per_call'].items() if v['calls']>5})"; }
python3 tools/cycle_timeline.py --draft $D --prompts 16 --orders prefill,walk,prefill,walk --plain --work /tmp/cellspec-gpu --out $OUT/timeline.json 2>&1 | grep -v 'plugin EP' | tail -5
for i in 1 2; do
taskset -c 2 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --orders prefill,walk --out $OUT/bench$i --work /tmp/cellspec-gpu 2>&1 | summ
done
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 2,4,8 --tokens 96 --orders prefill --out $OUT/bench248 --work /tmp/cellspec-gpu 2>&1 | summ
python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --out $OUT/steps --work /tmp/cellspec-steps > $OUT/steps.log 2>&1; grep '^{' $OUT/steps.log | cut -c1-400
CELLSPEC_DRAFT=$D timeout 280 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
