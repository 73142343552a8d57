# 2026-12-07 (eighteenth sitting), call 3 (same machine): the device tests with one-row steps
# overlapped; A's one-row chained step with CELLSPEC_CUDA_OVERLAP=all, fetch on and off, against
# the default; plain against trees of 15 with all against the default.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP CELLSPEC_CUDA_PREFETCH_CELLS; mkdir -p $OUT
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); CELLSPEC_CUDA_OVERLAP=all timeout 60 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "on_the_device or lone_sessions_tree" > $OUT/tests-all.log 2>&1; echo "tests (all) rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/tests-all.log
for arm in one all:0 all:1 one all:1 all:0; do s=$(date +%s)
  case $arm in one) o=1; p=1;; all:0) o=all; p=0;; all:1) o=all; p=1;; esac
  CELLSPEC_CUDA_OVERLAP=$o CELLSPEC_CUDA_PREFETCH_CELLS=$p timeout 40 python3 tools/gpu_bench.py steps --shapes A --batches 1 --chains 16 --out /tmp/steps-x > /tmp/steps.log 2>&1; echo "steps $arm rc=$? $(( $(date +%s) - s )) s"
  grep step_ms /tmp/steps.log | sed "s/^/$arm /" >> $OUT/steps.log; tail -1 $OUT/steps.log | cut -c1-200
done
for arm in all one all one; do s=$(date +%s)
  case $arm in all) v=all;; *) v=1;; esac
  CELLSPEC_CUDA_OVERLAP=$v timeout 50 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/ab.out >> $OUT/ab-overlap.log; grep summary /tmp/ab.out | cut -c1-400
done
