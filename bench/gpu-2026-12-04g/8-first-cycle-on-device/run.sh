source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
W=/tmp/cellspec-gpu
echo "== tests"
CELLSPEC_DRAFT=$D timeout 230 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k "cell or tree or walked or grown or anchors" > $OUT/gpu_tests.log 2>&1; tail -1 $OUT/gpu_tests.log
grep -E "^FAILED|^ERROR" $OUT/gpu_tests.log | head -5
echo "== timeline"
timeout 110 python3 tools/cycle_timeline.py --draft $D --prompts 16 --orders prefill,prefill-host,prefill,prefill-host --plain --work /tmp/cellspec-timeline --out $OUT/timeline.json > $OUT/timeline.log 2>&1; grep '^{' $OUT/timeline.log | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); p=r['prompts']
    print(r['order'], 'tok/s %.0f' % r['tokens_per_s'], 'request %.2f start %.3f prefill %.3f' % (p['request_ms'], p['start_ms'], p['prefill_busy_ms']), {k[11:]: round(v,3) for k,v in p.items() if k.startswith('start_idle')})"
echo "== paired 205"
timeout 60 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --prompts 205 --paired --out $OUT/paired --work $W > $OUT/paired.log 2>&1; grep '^{' $OUT/paired.log | cut -c1-420
