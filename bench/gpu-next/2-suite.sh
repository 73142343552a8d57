# Written 2026-12-06 (eleventh sitting), not yet run: that sitting's one staged H100 was taken
# back during this call. The first call after staging (bash .gpu/q0..q15/recv.sh),
# carrying [".gpu/fin", ".gpu/ort-include"]: the last part installed, the plugin's default build,
# then the whole GPU suite on this checkout (last run on 9280180, the seventh sitting; since then
# plugins.build's flags (ce16d38), row_wgmma_kernel's opt-in pipeline (58c6f67) and dflash's
# tree refusal message (0ad9944) changed).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 420 python3 -m pytest -q -p no:randomly -m gpu tests/gpu > $OUT/suite.log 2>&1; echo "suite rc=$? $(( $(date +%s) - s )) s"; tail -2 $OUT/suite.log
grep -E "^(FAILED|ERROR)" $OUT/suite.log | head -20
