# the whole GPU suite on the final tree, then the verify row limit at 1, 2 and 4 sessions
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
WORK=/tmp/cellspec-gpu; SHIPPED=cellspec/drafts/smollm2-135m-instruct; mkdir -p $WORK
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
    | tee $OUT/gpu_tests.log | tail -2
for r in 1; do
  CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
      --draft $SHIPPED --batches 1,2,4 --tokens 96 --max-spec-batch 4 \
      --max-verify-rows none,16 --out $OUT/rows-$r --work $WORK 2>&1 | grep "^{" \
      | python3 -c "import json, sys
for line in sys.stdin:
    row = json.loads(line)
    calls = {k: (v['calls'], round(v['ms_per_call'], 3)) for k, v in row['ms_per_call'].items()
             if k.startswith('static')}
    print({k: row.get(k) for k in ('speculation', 'max_verify_rows', 'batch', 'tokens_per_s', 'tau', 'round_ms')}, calls)"
done
