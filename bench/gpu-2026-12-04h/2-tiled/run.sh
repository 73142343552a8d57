# eighth sitting, call 1: tiled RowMatMul weights + deep loads. Builds, the whole GPU suite,
# steps on A and B in HEAD's tree (.gpu/base) and this one, twice, B's kernels.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w22.sh $OUT/run.sh
(cd .gpu/base && python3 -m cellspec.plugins.build > $OUT/build_base.log 2>&1) &
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -30 $OUT/build.log; exit 4; }
wait
export CELLSPEC_CUDA_ATTENTION=cell
python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py -k "tiled or layout" 2>&1 | tail -3
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 300 python3 -m pytest -q -p no:cacheprovider -W ignore -x tests/gpu > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
for round in 1 2; do
  for tree in .gpu/base .; do
    name=$([ $tree = . ] && echo new || echo base)
    (cd $tree && python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --out $OUT/steps-$name-$round --work /tmp/w-$name 2>&1 | grep -v "plugin EP" | tail -4 | cut -c1-220)
  done
done
for tree in .gpu/base .; do
  name=$([ $tree = . ] && echo new || echo base)
  (cd $tree && CELLSPEC_CUDA_OVERLAP=0 python3 tools/gpu_bench.py kernels --shapes B --batches 1 --widths 1 --steps 16 --out $OUT/kernels-$name --work /tmp/w-$name 2>&1 | grep -v "plugin EP" | tail -3 | cut -c1-220)
done
