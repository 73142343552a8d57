source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=$PWD/cellspec/drafts/smollm2-135m-instruct
summ() { grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['speculation'], r.get('order'), r['batch'], round(r['tokens_per_s'],1), r.get('tau'), r.get('round_ms'), r.get('host_probe_ms'))"; }
stepsumm() { grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['shape'], r['batch'], round(r['step_ms'],4), round(r['host_outside_engine_ms'],4))"; }
for round in 1 2; do
for tree in .gpu/base .; do
  name=$([ "$tree" = . ] && echo new || echo base)
  echo "== $name $round"
  (cd $tree && python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --out $OUT/steps-$name-$round --work /tmp/cellspec-steps 2>&1 | stepsumm)
  (cd $tree && python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --out $OUT/real-$name-$round --work /tmp/cellspec-gpu 2>&1 | summ)
done
done
