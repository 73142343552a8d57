# Seventh sitting (2026-12-06), after the check (1-check.log) on an H100: the plugin's default
# build, the whole GPU suite with the tensor-core attention chunk the default for heads of 128
# (first full run of that default), then shape B's decode step at 256 cells with that default
# against CELLSPEC_CUDA_MMA_ATTENTION=0, one process each, twice in turn.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA; mkdir -p $OUT
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 330 python3 -m pytest -q -p no:randomly -m gpu tests/gpu > $OUT/suite.log 2>&1; echo "suite rc=$? $(( $(date +%s) - s )) s"; tail -4 $OUT/suite.log
grep -E "^(FAILED|ERROR)" $OUT/suite.log | head -20
for run in mma off mma off; do s=$(date +%s)
  ( [ $run = off ] && export CELLSPEC_CUDA_MMA_ATTENTION=0; timeout 60 python3 tools/gpu_bench.py steps --shapes B --batches 1 --context 256 --out $OUT/steps-$run > $OUT/steps-$run.log 2>&1 ); echo "steps $run rc=$? $(( $(date +%s) - s )) s"; grep "^{" $OUT/steps-$run.log | tail -2 | cut -c1-300
done
