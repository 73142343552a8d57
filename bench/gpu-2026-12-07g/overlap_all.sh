# 2026-12-07 (eighteenth sitting), call 2 (after prefetch.sh, same machine): steps of one row
# overlapped too (CELLSPEC_CUDA_OVERLAP=all) against the default (one-row steps launched plainly),
# with pair_kernel's fetch on: shapes A and B, batch 1 and 8, 1,024 cells, chains of 16; then
# plain against trees of 15 in both settings, alternating; the device tests overlapped.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP CELLSPEC_CUDA_PREFETCH_CELLS; mkdir -p $OUT
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); CELLSPEC_CUDA_OVERLAP=all timeout 150 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "on_the_device or lone_sessions_tree or speculat or captured" > $OUT/tests-all.log 2>&1; echo "tests (all) rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/tests-all.log
for arm in one all one all; do s=$(date +%s)
  case $arm in all) v=all;; *) v=1;; esac
  CELLSPEC_CUDA_OVERLAP=$v timeout 120 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --out /tmp/steps-$arm > /tmp/steps.log 2>&1; echo "steps $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/steps.log | grep step_ms >> $OUT/steps.log; python3 tools/gpu_bench.py summarize /tmp/steps.log | cut -c1-200
done
for arm in all one all one; do s=$(date +%s)
  case $arm in all) v=all;; *) v=1;; esac
  CELLSPEC_CUDA_OVERLAP=$v timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/ab.out >> $OUT/ab-overlap.log; grep summary /tmp/ab.out | cut -c1-600; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
