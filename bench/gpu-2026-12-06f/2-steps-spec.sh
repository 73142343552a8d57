# 2026-12-06 (sixth sitting), call 2: bench/gpu-next's item 1 in one call — shapes A and B at
# batch 1 and 8, one `execute` a step against chains of 16 as the caller sees each token; then
# the real SmolLM2 (float16, shipped draft, 64 held-out prompts, 256-token answers, batch 1)
# plain against speculative paired, two processes. The plugin was built by call 1.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)" ; nproc
s=$(date +%s); timeout 220 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 1,16 --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log | cut -c1-330
P="tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in free1 free2; do s=$(date +%s)
  timeout 140 python3 $P --out $OUT/$run > $OUT/$run.log 2>&1; echo "$run rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300
done
