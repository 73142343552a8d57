set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w6.sh $OUT/run.sh
ROOT=$PWD
W=/tmp/cellspec-gpu
echo "== builds"
python3 -m cellspec.plugins.build 2>&1 | tail -1
(cd .gpu/base && python3 -m cellspec.plugins.build 2>&1 | tail -1)
echo "== op tests (new)"
timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 | tee $OUT/op_tests.log | tail -2
grep -q " passed" $OUT/op_tests.log && ! grep -q "failed\|error" $OUT/op_tests.log || exit 5
for side in base new; do
  echo "== kernels $side"
  if [ $side = base ]; then cd .gpu/base; else cd $ROOT; fi
  CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell timeout 120 python3 tools/gpu_bench.py kernels --shapes A,B \
    --batches 1 --widths 1,16 --context 1024 --steps 16 --out $OUT/kernels-$side --work $W 2>&1 \
    | grep -v "plugin EP" | grep -v "^    " | cut -c1-200 | tail -4
  python3 $ROOT/.gpu/probe/summ.py $OUT/kernels-$side/kernels.json | grep -v "x1 " | head -40
  cd $ROOT
done
for r in 1 2; do for side in base new; do
  echo "== steps $side ($r)"
  if [ $side = base ]; then cd .gpu/base; else cd $ROOT; fi
  CELLSPEC_CUDA_ATTENTION=cell timeout 120 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 \
    --out $OUT/steps-$side-$r --work $W 2>&1 | grep -v "plugin EP" | tail -6
  cd $ROOT
done; done
