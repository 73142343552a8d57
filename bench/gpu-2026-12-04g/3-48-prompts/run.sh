source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
W=/tmp/cellspec-gpu
for i in 1 2 3; do
echo "== smollm2 $i"
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --prompts 48 --out $OUT/bench$i --work $W > $OUT/bench$i.log 2>&1
grep '^{' $OUT/bench$i.log | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['speculation'], 'tok/s', round(r['tokens_per_s'],1), 'decode', round(r.get('decode_tokens_per_s',0),1), 'first_ms', round(r.get('first_token_ms',0),3), 'tau', r.get('tau'), 'round', r.get('round_ms'), 'probe', round(r.get('host_probe_ms'),2))"
done
echo "== timeline"
timeout 150 python3 tools/cycle_timeline.py --draft $D --prompts 16 --orders prefill,prefill --plain --work /tmp/cellspec-timeline --out $OUT/timeline.json > $OUT/timeline.log 2>&1; grep '^{' $OUT/timeline.log
