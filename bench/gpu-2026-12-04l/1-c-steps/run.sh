# twelfth sitting, call 1: shape C (Qwen3-8B, 36 layers, vocab 151936, random float16) decode steps at
# batch 1, 8, 32 over 1,024 cells, CellAttention + RowMatMul, one execute per step and chains of 16.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1
mkdir -p $OUT; cp .gpu/probe/c1.sh $OUT/run.sh
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
s=$(date +%s)
timeout 540 python3 tools/gpu_bench.py steps --shapes C --batches 1,8,32 --chains 1,16 --context 1024 \
  --out $OUT/c-steps --work /tmp/cw > $OUT/c-steps.log 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $OUT/c-steps.log
grep -v 'plugin EP' $OUT/c-steps.log | grep -o '"batch": [0-9]*\|"chain[a-z_]*": [0-9]*\|"step_ms": [0-9.]*\|"x_floor": [0-9.]*\|"host_outside_engine_ms": [0-9.]*\|rc=.*' | paste -s -d' ' | sed 's/"batch"/\n"batch"/g'
tail -3 $OUT/c-steps.log | cut -c1-300
