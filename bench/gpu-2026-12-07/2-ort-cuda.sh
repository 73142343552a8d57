# 2026-12-07, on the machine 1-build-kernels.sh installed and built on (the plugin in place), no
# carry needed: the runtime's GPU tests (tests/gpu/test_ort_cuda.py), then shape B's decode step
# at 256 cells twice (as 2-suite-steps.sh's tail, the default attention only).
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA; mkdir -p $OUT
s=$(date +%s); timeout 360 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py > $OUT/suite-ort-cuda.log 2>&1; echo "ort-cuda rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/suite-ort-cuda.log
grep -E "^(FAILED|ERROR)" $OUT/suite-ort-cuda.log | head -20
for run in 1 2; do s=$(date +%s)
  timeout 60 python3 tools/gpu_bench.py steps --shapes B --batches 1 --context 256 --out $OUT/steps-$run > $OUT/steps-$run.log 2>&1; echo "steps $run rc=$? $(( $(date +%s) - s )) s"; grep "^{" $OUT/steps-$run.log | tail -2 | cut -c1-300
done
