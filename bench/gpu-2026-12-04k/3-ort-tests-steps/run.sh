# eleventh sitting, call 3: the CellAttention ORT tests (GGUF staged), then whole steps of A and B at 1,024 cells,
# chains of 16, HEAD's tree and this one.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w32.sh $OUT/run.sh
export CELLSPEC_CUDA_ATTENTION=cell
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 230 python3 -m pytest -q -rs -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k "cell" > $OUT/gpu_tests.log 2>&1; tail -3 $OUT/gpu_tests.log
st() {
  (cd $1 && timeout 150 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --context 1024 --out $OUT/steps-$2 --work /tmp/w-$2 > $OUT/steps-$2.log 2>&1; grep -o '"shape": "[AB]"\|"batch": [0-9]*\|"step_ms": [0-9.]*' $OUT/steps-$2.log | paste - - - )
}
st .gpu/base base1; st . new1
