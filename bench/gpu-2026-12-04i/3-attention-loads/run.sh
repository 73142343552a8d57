# ninth sitting, call 3: CellAttention's load chains. This tree: the key's cell and mask bits
# loaded before the queries (pair and chunk kernels) and the pair kernel's values with its keys;
# .gpu/var: the same without the early values. Builds, the op tests of both, kernels on A and B
# (batches 1 and 8, 1 and 16 rows) in turn: this tree, the variant, HEAD (.gpu/base), this tree.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w27.sh $OUT/run.sh
(cd .gpu/var && python3 -m cellspec.plugins.build > /dev/null 2>&1) &
(cd .gpu/base && python3 -m cellspec.plugins.build > /dev/null 2>&1) &
python3 -m cellspec.plugins.build > /dev/null 2>&1 || { echo build failed; exit 4; }
wait
export CELLSPEC_CUDA_ATTENTION=cell
timeout 90 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/tests_ops.log 2>&1; tail -1 $OUT/tests_ops.log
(cd .gpu/var && PYTHONPATH=/tmp/gpusite:$PWD timeout 90 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/var_tests_ops.log 2>&1); tail -1 $OUT/var_tests_ops.log
kern() {
  (cd $1 && CELLSPEC_CUDA_OVERLAP=0 timeout 110 python3 tools/gpu_bench.py kernels --shapes A,B --batches 1,8 --widths 1,16 --context 256 --steps 16 --out $OUT/kernels-$2 --work /tmp/w-$2 > /dev/null 2>&1; python3 $OLDPWD/.gpu/probe/summ.py $OUT/kernels-$2/kernels.json | grep "batch")
}
kern . new1; kern .gpu/var var1; kern .gpu/base base1; kern . new2
