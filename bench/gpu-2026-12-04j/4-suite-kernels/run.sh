# tenth sitting, call A: key rows read a warp at a time through a staging buffer (pair_kernel always, chunk_kernel
# where its blocks fit at once), pair_kernel's first new token loaded with its cells. Builds (HEAD's tree .gpu/base and
# this one), the op tests, the CellAttention ORT tests, kernels on A and B in turn twice.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w28.sh $OUT/run.sh
(cd .gpu/base && python3 -m cellspec.plugins.build > /dev/null 2>&1) &
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { echo build failed; tail -30 $OUT/build.log; exit 4; }
wait
export CELLSPEC_CUDA_ATTENTION=cell
timeout 120 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/gpu_tests_ops.log 2>&1; tail -1 $OUT/gpu_tests_ops.log
kern() {
  (cd $1 && CELLSPEC_CUDA_OVERLAP=0 python3 tools/gpu_bench.py kernels --shapes A,B --batches 1 --widths 1,16 --context 256 --steps 16 --out $OUT/kernels-$2 --work /tmp/w-$2 > /dev/null 2>&1; python3 $OLDPWD/.gpu/probe/summ.py $OUT/kernels-$2/kernels.json | grep "batch")
}
(cd .gpu/bin && ./pnew pair > $OUT/pair_new.txt 2>&1; ./pnewc pair > $OUT/pair_newc.txt 2>&1; ./pnew > $OUT/chunk_new.txt 2>&1)
kern .gpu/base base1; kern . new1
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 230 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k "cell" > $OUT/gpu_tests.log 2>&1; tail -1 $OUT/gpu_tests.log
kern . new2; kern .gpu/base base2
