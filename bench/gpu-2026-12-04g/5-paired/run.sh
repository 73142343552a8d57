source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
W=/tmp/cellspec-gpu
show() { grep '^{' $1 | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l)
    if r.get('spec_over_plain'):
        print('  ratio b%d: tok/s %.3f decode %.3f median %.3f median-decode %.3f same %d/%d probe %s' % (r['batch'], r['tokens_per_s'], r['decode_tokens_per_s'], r['median_batch_ratio'], r['median_batch_decode_ratio'], r['same_answers'], r['batches'], [round(p,2) for p in r['host_probe_ms']]))
    else:
        print('  spec' if r['speculation'] else '  plain', 'b%d' % r['batch'], 'tok/s %.1f decode %.1f first %.3f tau %s' % (r['tokens_per_s'], r['decode_tokens_per_s'], r['first_token_ms'], r['tau']))"; }
for i in 1 2; do
echo "== paired greedy $i"
timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1,8 --tokens 96 --prompts 48 --paired --out $OUT/greedy$i --work $W > $OUT/greedy$i.log 2>&1; show $OUT/greedy$i.log
done
echo "== paired t0.7 p0.9"
timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --prompts 48 --temperature 0.7 --top-p 0.9 --paired --out $OUT/sampled --work $W > $OUT/sampled.log 2>&1; show $OUT/sampled.log
