# 2026-12-06 (second sitting), call 5 (after staging): whole decode steps of shapes A and B at
# batch 1 and 8, 1,024 tokens of context, one `execute` a step (--chains 1: the host waits for
# each step's token before it stages the next) against `Executor.decode` chains of 16 with every
# step's tokens handed to the caller as they are known (on_step, as LLM.stream gets them; new
# token_interval_ms), the same process. Ran (after a second staging, on a second H100) with the
# staging's last call: `bash .gpu/p5/recv.sh > /tmp/p5.log 2>&1; bash THIS`
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); timeout 240 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 1,16 --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log | cut -c1-330
