# 2026-12-07: bench/gpu-2026-12-06g/2-suite-steps.sh in two shorter calls (two machines in a row
# were taken back during that script's single 400-s call), each keeping what it finishes.
#   bash bench/gpu-2026-12-07/suite.sh kernels   after staging (bash .gpu/q0..q15/recv.sh), carrying
#       [".gpu/fin", ".gpu/ort-include"]: install, plugin build, the plugin's kernel tests.
#   bash bench/gpu-2026-12-07/suite.sh ort-cuda  next, on the same machine, no carry: the runtime's
#       GPU tests, then shape B's decode step at 256 cells twice (the default attention).
part=${1:?kernels or ort-cuda}
if [ "$part" = kernels ]; then bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log; fi
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
case $part in
kernels)
  s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
  tests=tests/gpu/test_cell_attention.py; limit=240 ;;
ort-cuda) tests=tests/gpu/test_ort_cuda.py; limit=360 ;;
*) echo "unknown part $part"; exit 2 ;;
esac
s=$(date +%s); timeout $limit python3 -m pytest -q -p no:randomly -m gpu $tests > $OUT/suite-$part.log 2>&1; echo "$part rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/suite-$part.log
grep -E "^(FAILED|ERROR)" $OUT/suite-$part.log | head -20
# the first run exports B (30 s) and builds its sessions: 60 s was too short on 2026-12-07's H100
if [ "$part" = ort-cuda ]; then for run in 1 2; do s=$(date +%s)
  timeout 120 python3 tools/gpu_bench.py steps --shapes B --batches 1 --context 256 --out $OUT/steps-$run > $OUT/steps-$run.log 2>&1; echo "steps $run rc=$? $(( $(date +%s) - s )) s"; grep "^{" $OUT/steps-$run.log | tail -2 | cut -c1-300
done; fi
