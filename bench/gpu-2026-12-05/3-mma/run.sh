# the tensor-core chunk (bench/gpu-2026-12-04n/mma-attention.patch) applied: the plugin built,
# CellAttention's GPU tests (its new test reruns them with the kernel on), then steps on B at
# batch 1 and 8 with the kernel off and on
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1; mkdir -p $OUT
patch -p1 -s < bench/gpu-2026-12-04n/mma-attention.patch || exit 5
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
timeout 240 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/cell_tests.log 2>&1
tail -3 $OUT/cell_tests.log; grep -E "^FAILED|^ERROR" $OUT/cell_tests.log | head
for m in 0 1 0 1; do echo "== mma $m"; CELLSPEC_CUDA_MMA_ATTENTION=$m timeout 120 python3 tools/gpu_bench.py steps --shapes B --batches 1,8 --out $OUT/b-mma$m --work /tmp/cellspec-gpu 2>&1 | grep -v "plugin EP" | tail -3; done
