# 2026-12-06, call 2 (the same machine): sampled at 0.7 / top-p 0.9, plain against the
# defaults paired; then issue 8's steps on shapes B and C at batch 1 and 8 against their floors
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); timeout 150 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --temperature 0.7 --top-p 0.9 --out $OUT/paired-t07 --work /tmp/cellspec-gpu > $OUT/paired-t07.log 2>&1; echo "t07 paired rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/paired-t07.log
s=$(date +%s); timeout 400 python3 tools/gpu_bench.py steps --shapes B,C --batches 1,8 --chains 1 --out $OUT/steps-bc > $OUT/steps-bc.log 2>&1; echo "steps-bc rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps-bc.log
