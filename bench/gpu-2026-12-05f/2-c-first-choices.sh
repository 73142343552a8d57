# twenty-first sitting, call 2: C's DFlash cycle at batch 1 (random 5-layer draft of block 16,
# taps 1, 9, 17, 25, 33, 1,024 cells, the tensor-core chunk on) as chains of 15 and as trees of
# each row's first choice (15:1: the chain grown, walked and queued on the device as a tree), one
# process, with the kernels' tails and the device's timeline; reuses call 1's export
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell CELLSPEC_CUDA_MMA_ATTENTION=1
L=$OUT/c-dflash.log; s=$(date +%s)
timeout 575 python3 tools/gpu_bench.py dflash --shape C --context 1024 --batches 1 --tree-nodes ${TREES:-0,15:1} --kernels --timeline --out $OUT/c-dflash --work /tmp/cw > $L 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $L
grep -v "plugin EP" $L | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        r = json.loads(l); print(r['batch'], 'trees', r['tree_nodes'], r['tree_choices'], 'cycle', round(r['cycle_ms'], 3), 'step', round(r['plain_step_ms'], 3), 'x', round(r['cycle_over_step'], 3), 'host', round(r['host_outside_engine_ms'], 3), {k: round(v, 3) for k, v in r['ms_per_call'].items()})
    elif not l.startswith('    '): print(l.rstrip()[:400])"
