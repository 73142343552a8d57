# 2026-12-06, call 1 (after staging, the same machine): the real SmolLM2 float16 with the
# defaults (trees of 15, eight choices a row), plain against speculative side by side
# (--paired, two processes), then shape A's step and host time a step at batch 1 and 8
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
for i in ${PAIRS:-1 2}; do s=$(date +%s)
  timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --out $OUT/paired$i --work /tmp/cellspec-gpu > $OUT/paired$i.log 2>&1; echo "paired$i rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/paired$i.log
done
s=$(date +%s); timeout 150 python3 tools/gpu_bench.py steps --shapes A --batches 1,8 --chains 1 --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log
