# tenth sitting, call B: whole steps of A and B at 1,024 cells, chains of 16, HEAD's tree and this one in turn.
source /tmp/gpusite/env.sh || exit 3
mkdir -p $OUT
cp .gpu/probe/w29.sh $OUT/run.sh
export CELLSPEC_CUDA_ATTENTION=cell
st() {
  (cd $1 && timeout 250 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --context 1024 --out $OUT/steps-$2 --work /tmp/w-$3 > $OUT/steps-$2.log 2>&1; grep -o '"shape": "[AB]"\|"batch": [0-9]*\|"step_ms": [0-9.]*' $OUT/steps-$2.log | paste - - - )
}
st . new2 new; st .gpu/base base2 base
