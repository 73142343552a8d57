source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
W=/tmp/cellspec-gpu
echo "== tests"
CELLSPEC_DRAFT=$D timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k "cell or tree or walked or grown" > $OUT/gpu_tests.log 2>&1; tail -2 $OUT/gpu_tests.log
for i in 1 2; do
echo "== smollm2 $i"
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --out $OUT/bench$i --work $W > $OUT/bench$i.log 2>&1
grep '^{' $OUT/bench$i.log | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['speculation'], r.get('order'), r['batch'], 'tok/s', round(r['tokens_per_s'],1), 'decode', round(r.get('decode_tokens_per_s',0),1), 'first_ms', round(r.get('first_token_ms',0),3), 'tau', r.get('tau'), 'round', r.get('round_ms'), 'probe', r.get('host_probe_ms'))"
done
echo "== timeline"
timeout 200 python3 tools/cycle_timeline.py --draft $D --prompts 16 --orders prefill,prefill --plain --work /tmp/cellspec-timeline --out $OUT/timeline.json > $OUT/timeline.log 2>&1; tail -45 $OUT/timeline.log
echo "== kernels B, launches plain"
CELLSPEC_CUDA_OVERLAP=0 timeout 150 python3 tools/gpu_bench.py kernels --shapes B --batches 1 --widths 1 --steps 16 --out $OUT/kernels --work $W > $OUT/kernels.log 2>&1
python3 .gpu/probe/summ.py $OUT/kernels/kernels.json
