# twelfth sitting, call 4: the fold limit (device_sessions.fold_limit): shape C's kernels at widths 1 and 16, then
# its whole steps at batch 1, 8, 32 over 1,024 cells in chains of 16, CellAttention + RowMatMul.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1
mkdir -p $OUT; cp .gpu/probe/c4.sh $OUT/run.sh
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
s=$(date +%s)
CELLSPEC_CUDA_OVERLAP=0 timeout 420 python3 tools/gpu_bench.py kernels --shapes C --batches 1 --widths 1,16 --context 1024 \
  --steps 8 --out $OUT/c-kernels --work /tmp/cw > $OUT/c-kernels.log 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $OUT/c-kernels.log
grep -v 'plugin EP' $OUT/c-kernels.log | grep -v Warn | grep -A9 '^{' | cut -c1-150
s=$(date +%s)
timeout 200 python3 tools/gpu_bench.py steps --shapes C --batches 1,8,32 --chains 16 --context 1024 \
  --out $OUT/c-steps --work /tmp/cw > $OUT/c-steps.log 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $OUT/c-steps.log
grep -v 'plugin EP' $OUT/c-steps.log | grep -o '"batch": [0-9]*\|"step_ms": [0-9.]*\|"x_floor": [0-9.]*\|rc=.*' | paste -s -d' ' | sed 's/"batch"/\n"batch"/g'
