# 2026-12-06 (fourth sitting), call 7 after staging: the plugin built with the API-version check
# on the real headers, the default attention resolved with the variable unset, one GPU test on
# it, and the README's first command on ort-cuda.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_CUDA_ATTENTION; mkdir -p $OUT
s=$(date +%s); python3 -c "from cellspec.runtime.ort_device import cuda_attention; print('default attention:', cuda_attention())" 2>&1 | tail -2; echo "resolve+build $(( $(date +%s) - s )) s"
timeout 60 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "test_float32_greedy_equals_cpu" 2>&1 | tail -2
s=$(date +%s); timeout 90 python3 -c "import sys; from cellspec.cli import main; sys.argv=['cellspec', 'generate', '--backend', 'ort-cuda', 'What is the capital of France? Answer in one sentence.']; main()" 2>$OUT/generate.err; echo "generate rc=$? $(( $(date +%s) - s )) s"; grep -v "No registered plugin" $OUT/generate.err | tail -3
