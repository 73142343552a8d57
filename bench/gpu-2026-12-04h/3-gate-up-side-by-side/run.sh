# eighth sitting, call 2: tiled RowMatMul weights with gate/up side by side. Builds, the
# CellAttention GPU tests, kernels and steps on A and B in HEAD's tree (.gpu/base) and this
# one, the real SmolLM2 plain vs speculative side by side.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w23.sh $OUT/run.sh
(cd .gpu/base && python3 -m cellspec.plugins.build > /dev/null 2>&1) &
python3 -m cellspec.plugins.build > /dev/null 2>&1 || { echo build failed; exit 4; }
wait
export CELLSPEC_CUDA_ATTENTION=cell
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 240 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu -k "cell or tree or walked or grown" > $OUT/gpu_tests.log 2>&1; tail -2 $OUT/gpu_tests.log
for tree in .gpu/base .; do
  name=$([ $tree = . ] && echo new || echo base)
  (cd $tree && CELLSPEC_CUDA_OVERLAP=0 python3 tools/gpu_bench.py kernels --shapes A,B --batches 1 --widths 1,16 --context 256 --steps 16 --out $OUT/kernels-$name --work /tmp/w-$name 2>&1 | grep -v "plugin EP" | tail -1 | cut -c1-100)
done
for round in 1 2; do
  for tree in .gpu/base .; do
    name=$([ $tree = . ] && echo new || echo base)
    (cd $tree && python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --out $OUT/steps-$name-$round --work /tmp/w-$name 2>&1 | grep -v "plugin EP" | grep step_ms | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print('$name', r['shape'], r['batch'], round(r['step_ms'],3), round(r['host_outside_engine_ms'],3))")
  done
done
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 96 --prompts 48 --paired --out $OUT/paired --work /tmp/w-new 2>&1 | grep -v "plugin EP" | tail -6 | cut -c1-400
