# one call for what device time is left: the real SmolLM2 float16 paired plain vs speculative
# at 256-token answers with chains of 7 going on with 8 looked-up tokens (call 2 had the default
# trees); then a DFlash cycle on B (random draft of block 16, 1,024 cells) with the tensor-core
# chunk off and on
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell D=cellspec/drafts/smollm2-135m-instruct
timeout 170 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 256 --prompts 64 --paired --lookup-tokens 8 --out $OUT/paired256-lookup --work /tmp/cellspec-gpu > $OUT/paired256-lookup.log 2>&1
grep -v "plugin EP" $OUT/paired256-lookup.log | tail -3
for m in 0 1; do echo "== mma $m"; CELLSPEC_CUDA_MMA_ATTENTION=$m timeout 85 python3 tools/gpu_bench.py dflash --shape B --with-draft --out $OUT/b-dflash-mma$m --work /tmp/cellspec-gpu > $OUT/dflash-mma$m.log 2>&1
  grep -v "plugin EP" $OUT/dflash-mma$m.log | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        r = json.loads(l); print(r['batch'], 'cycle', round(r['cycle_ms'], 3), 'step', round(r['plain_step_ms'], 3), 'x', round(r['cycle_over_step'], 3), {k: round(v, 3) for k, v in r['ms_per_call'].items()})"
done
