# thirteenth sitting, call 1: CellAttention's tilings of Qwen3-8B-headed verifies (probe verify-qwen, unstaged and
# staged), then shape C's whole steps at batch 1, 8, 32 over 1,024 cells in chains of 16 with the fold-limit fix.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1
mkdir -p $OUT; cp .gpu/probe/d1.sh $OUT/run.sh; git log --oneline -1 > $OUT/commit.txt 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt 2>&1
s=$(date +%s)
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" tools/cell_attention_probe.cu -o /tmp/probe > $OUT/nvcc.log 2>&1 || { tail $OUT/nvcc.log; exit 5; }
echo "built in $(( $(date +%s) - s )) s"
for st in 0 1; do CELLSPEC_PROBE_STAGED=$st timeout 60 /tmp/probe verify-qwen > $OUT/probe-staged$st.txt 2>&1; done
cut -c1-200 $OUT/probe-staged0.txt | sed 's/, max err/ err/'
cut -d: -f2 $OUT/probe-staged1.txt | cut -c1-60
export CELLSPEC_CUDA_ATTENTION=cell
s=$(date +%s)
timeout 400 python3 tools/gpu_bench.py steps --shapes C --batches 1,8,32 --chains 16 --context 1024 \
  --out $OUT/c-steps --work /tmp/cw > $OUT/c-steps.log 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $OUT/c-steps.log
grep -v 'plugin EP' $OUT/c-steps.log | grep -o '"batch": [0-9]*\|"step_ms": [0-9.]*\|"x_floor": [0-9.]*\|rc=.*' | paste -s -d' ' | sed 's/"batch"/\n"batch"/g'
grep export $OUT/c-steps.log | head -2
