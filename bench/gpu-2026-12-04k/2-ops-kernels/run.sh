# eleventh sitting, call 2: pair_kernel's values as whole rows (bench/gpu-2026-12-04j/next patch applied).
# Builds (HEAD's tree .gpu/base and this one), the op tests, kernels on A and B in turn twice.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w31.sh $OUT/run.sh
(cd .gpu/base && python3 -m cellspec.plugins.build > /dev/null 2>&1) &
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { echo build failed; tail -30 $OUT/build.log; exit 4; }
wait
export CELLSPEC_CUDA_ATTENTION=cell
timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/gpu_tests_ops.log 2>&1; tail -1 $OUT/gpu_tests_ops.log
kern() {
  (cd $1 && CELLSPEC_CUDA_OVERLAP=0 python3 tools/gpu_bench.py kernels --shapes A,B --batches 1 --widths 1,16 --context 256 --steps 16 --out $OUT/kernels-$2 --work /tmp/w-$2 > /dev/null 2>&1; python3 $OLDPWD/.gpu/probe/summ.py $OUT/kernels-$2/kernels.json | grep "batch")
}
kern .gpu/base base1; kern . new1; kern . new2; kern .gpu/base base2
