# 2026-12-07 (seventeenth sitting), the same machine after small_ops.sh (no carry): the base
# processes' host probe was slow (4-7 ms against 3.4-3.9) in small_ops.sh's A/B; again in the
# order base new new base base new, each process pinned to CPUs 0-7 (taskset), then op_timeline.py
# base/new twice more. ORDER overrides the arms' order.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
for arm in ${ORDER:-base new new base base new}; do s=$(date +%s)
  case $arm in base) dir=.gpu/base;; *) dir=.;; esac
  (cd $dir && timeout 150 taskset -c 0-7 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err); echo "ab $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-400; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
for arm in new base new base; do
  case $arm in base) dir=.gpu/base;; *) dir=.;; esac
  (cd $dir && timeout 100 taskset -c 0-7 python3 bench/gpu-2026-12-07e/op_timeline.py $ART 16 128 > /tmp/ops.out 2>/tmp/ops.err); echo "ops $arm rc=$?"
  tail -1 /tmp/ops.out | sed "s/^/$arm /" >> $OUT/ops.log; tail -1 $OUT/ops.log | cut -c1-420
done
