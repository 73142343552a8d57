# eighteenth sitting, call 2: a DFlash cycle on B (random 5-layer draft of block 16, 1,024 cells)
# with the tensor-core chunk off and on (first run with 110 s timeouts and 0 1 0 1: mma 0 timed out
# loading, twice)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
i=0; for m in 0 1; do i=$((i+1)); L=$OUT/dflash-$i-mma$m.log; echo "== mma $m"; CELLSPEC_CUDA_MMA_ATTENTION=$m timeout 200 python3 tools/gpu_bench.py dflash --shape B --with-draft --out $OUT/b-dflash-$i-mma$m --work /tmp/cellspec-gpu > $L 2>&1; echo rc=$?
  grep -v "plugin EP" $L | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        r = json.loads(l); print(r['batch'], 'cycle', round(r['cycle_ms'], 3), 'step', round(r['plain_step_ms'], 3), 'x', round(r['cycle_over_step'], 3), {k: round(v, 3) for k, v in r['ms_per_call'].items()})"
done
