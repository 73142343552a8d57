# 2026-12-06 (fourth sitting), call 4 (same machine as call 3): the GPU suite on the new default
# (CELLSPEC_CUDA_ATTENTION unset; the tests set each mode they check).
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_CUDA_ATTENTION; mkdir -p $OUT; s=$(date +%s); timeout 540 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu > $OUT/suite.log 2>&1; echo "suite rc=$? $(( $(date +%s) - s )) s"; tail -5 $OUT/suite.log
