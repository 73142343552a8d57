source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
stepsumm() { grep '^{\|^bindings' | python3 -c "
import json,sys
for l in sys.stdin:
    if l.startswith('bindings'): print(l.strip()); continue
    r=json.loads(l); print(r['shape'], r['batch'], round(r['step_ms'],4), round(r['host_outside_engine_ms'],4), {k: round(v,3) for k,v in r['phases_ms_per_step'].items()})"; }
python3 -c "import time; t=time.perf_counter(); sum(range(10**7)); print('probe s', round(time.perf_counter()-t,3))"
for round in 1 2 3; do
  echo "== base $round"; (cd .gpu/base && taskset -c 3 python3 tools/gpu_bench.py steps --shapes A,B --batches 8,1 --out $OUT/sb$round --work /tmp/cellspec-steps 2>&1 | stepsumm)
  echo "== new $round"; taskset -c 3 python3 .gpu/probe/count_bindings.py steps --shapes A,B --batches 8,1 --out $OUT/sn$round --work /tmp/cellspec-steps 2>&1 | stepsumm
done
