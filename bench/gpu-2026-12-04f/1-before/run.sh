source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
python3 tools/cycle_timeline.py --draft $D --prompts 16 --orders walk --plain --work /tmp/cellspec-gpu --out $OUT/timeline1.json 2>&1 | grep -v 'plugin EP' | tail -5
python3 tools/cycle_timeline.py --draft $D --prompts 16 --orders walk --plain --work /tmp/cellspec-gpu --out $OUT/timeline2.json --profile $OUT/profile 2>&1 | grep -v 'plugin EP' | tail -5
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --out $OUT/bench --work /tmp/cellspec-gpu 2>&1 | grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['speculation'], round(r['tokens_per_s'],1), r.get('tau'), r.get('round_ms'), {k:(v['calls'],round(v['ms_per_call'],3)) for k,v in r['ms_per_call'].items() if v['calls']>5})"
