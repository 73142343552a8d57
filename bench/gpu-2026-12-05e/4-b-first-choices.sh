# twentieth sitting, call 4 (a fresh machine): staged, the plugin built, grow_trees' GPU tests
# (with tree_choices) and TopLogSoftmax's, then shape B exported and its DFlash cycle timed at
# batch 1 as chains (as call 3) and as trees of each row's first choice (15:1: the chain queued
# on the device as a tree is), with the device's timeline and the kernels' tails
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }; echo "build $(( $(date +%s) - s )) s"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_ort_cuda.py -k "grown" > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log
export CELLSPEC_CUDA_ATTENTION=cell CELLSPEC_CUDA_MMA_ATTENTION=1
L=$OUT/b-dflash.log; s=$(date +%s)
timeout 400 python3 tools/gpu_bench.py dflash --shape B --with-draft --context 1024 --batches 1 --tree-nodes ${TREES:-0,15:1} --kernels --timeline --out $OUT/b-dflash --work /tmp/bw > $L 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $L
grep -v "plugin EP" $L | python3 -c "
import sys, json
for l in sys.stdin:
    if l.startswith('{'):
        r = json.loads(l); print(r['batch'], 'trees', r['tree_nodes'], r['tree_choices'], 'cycle', round(r['cycle_ms'], 3), 'step', round(r['plain_step_ms'], 3), 'x', round(r['cycle_over_step'], 3), 'host', round(r['host_outside_engine_ms'], 3), {k: round(v, 3) for k, v in r['ms_per_call'].items()})
    elif not l.startswith('    '): print(l.rstrip()[:400])"
