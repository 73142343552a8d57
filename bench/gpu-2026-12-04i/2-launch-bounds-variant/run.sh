# ninth sitting, call 2: a variant of call 1's kernel (.gpu/var: launch bounds of 4 blocks a
# multiprocessor for the shallow plain and rotary builds, SwiGLU's stride a run-time value again).
# Builds, the variant's op tests, kernels on A and B (this tree and the variant, in turn, twice),
# whole steps of B at 1,024 cells.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w26.sh $OUT/run.sh
(cd .gpu/var && python3 -m cellspec.plugins.build > /dev/null 2>&1) &
python3 -m cellspec.plugins.build > /dev/null 2>&1 || { echo build failed; exit 4; }
wait
export CELLSPEC_CUDA_ATTENTION=cell
(cd .gpu/var && PYTHONPATH=/tmp/gpusite:$PWD timeout 120 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/var_tests_ops.log 2>&1); tail -1 $OUT/var_tests_ops.log
kern() {
  (cd $1 && CELLSPEC_CUDA_OVERLAP=0 python3 tools/gpu_bench.py kernels --shapes A,B --batches 1 --widths 1,16 --context 256 --steps 16 --out $OUT/kernels-$2 --work /tmp/w-$2 > /dev/null 2>&1; python3 $OLDPWD/.gpu/probe/summ.py $OUT/kernels-$2/kernels.json | grep "batch")
}
kern . new1; kern .gpu/var var1; kern .gpu/var var2; kern . new2
timeout 170 python3 tools/gpu_bench.py steps --shapes B --batches 1,8 --context 1024 --out $OUT/steps-B --work /tmp/w-steps > $OUT/steps.log 2>&1; tail -8 $OUT/steps.log
