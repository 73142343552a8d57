set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
W=/tmp/cellspec-gpu
python3 -m cellspec.plugins.build 2>&1 | tail -1
echo "== kernels at 256 cells, launches plain"
CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell timeout 200 python3 tools/gpu_bench.py kernels \
  --shapes A,B --batches 1 --widths 1,16,32 --context 256 --steps 16 --out $OUT/kernels256 --work $W 2>&1 \
  | grep '^{' | cut -c1-200
python3 .gpu/probe/summ.py $OUT/kernels256/kernels.json
echo "== op tests (overlap as the default)"
timeout 300 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 | tail -4
echo "== op tests, CELLSPEC_CUDA_OVERLAP=0"
CELLSPEC_CUDA_OVERLAP=0 timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 | tail -3
