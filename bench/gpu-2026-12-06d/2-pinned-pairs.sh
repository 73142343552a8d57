# 2026-12-06 (fourth sitting): run again as bench/gpu-2026-12-06c/ had it (first H100 of the sitting)
# 2026-12-06 (third sitting), call 2: plain against speculative paired (the real SmolLM2
# float16, 64 held-out prompts, 256-token answers, batch 1), free and pinned to two cores in
# turn (bench/gpu-2026-12-06b/6-chained-pinned.sh's second half): does pinning steady the
# H200's host, whose probe ranged 3.3-6.5 ms between processes on 2026-12-06's morning?
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
P="tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in ${RUNS:-free1 pinned1 free2 pinned2}; do s=$(date +%s)
  case $run in pinned*) pre="taskset -c 2,3";; *) pre="";; esac
  timeout 130 $pre python3 $P --out $OUT/$run > $OUT/$run.log 2>&1; echo "$run rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300
done
