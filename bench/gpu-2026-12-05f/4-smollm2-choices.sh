# twenty-first sitting, calls 4a and 4b (after call 3, the same machine): the real SmolLM2 float16,
# trees of 15 by choices a row, repeated and interleaved in one process (the host's speed drifts
# within a process, so neighbours are compared); TREES=15:1,15:2,15:3,15,15:1 (4a) and
# TREES=15:2,15,15:2,15,15:1,15:2,15,15:3,15:2,15 (4b)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --tree-nodes $TREES --out $OUT/smollm2 --work /tmp/cellspec-gpu > $OUT/smollm2.log 2>&1; echo rc=$?
grep "^{" $OUT/smollm2.log | python3 -c "
import sys, json
for l in sys.stdin:
    r = json.loads(l); print(r['speculation'], r['tree_nodes'], r['tree_choices'], 'tok/s', round(r['tokens_per_s'],1), 'dec', round(r['decode_tokens_per_s'],1), 'tau', r['tau'] and round(r['tau'], 3), {k: round(v['ms_per_call'],3) for k, v in r['ms_per_call'].items() if v['calls'] > 100})"
