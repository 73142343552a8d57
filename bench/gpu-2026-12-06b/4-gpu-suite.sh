# 2026-12-06 (second sitting), call 4 (the same H100): the GPU suite on main at e501769 (the
# tests' pytest comes from the staged wheels)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
s=$(date +%s); timeout 420 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu > $OUT/gpu-suite.log 2>&1; echo "suite rc=$? $(( $(date +%s) - s )) s"; tail -5 $OUT/gpu-suite.log
