# 2026-12-07, after staging (bash .gpu/q0..q15/recv.sh), carrying [".gpu/fin", ".gpu/ort-include"]:
# the first half of bench/gpu-2026-12-06g/2-suite-steps.sh in a shorter call (two machines in a
# row were taken back during that script's single 400-s call): install, plugin build, then the
# plugin's kernel tests (tests/gpu/test_cell_attention.py). 2-ort-cuda.sh runs the rest.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"; git log --oneline -1 2>/dev/null
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 240 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py > $OUT/suite-kernels.log 2>&1; echo "kernels rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/suite-kernels.log
grep -E "^(FAILED|ERROR)" $OUT/suite-kernels.log | head -20
