# twenty-third sitting, call 4 (the same machine, after calls 1-3): the real SmolLM2 float16 at
# temperature 0.7 / top-p 0.9, plain against the defaults paired, then trees of 15 from 4 against 8
# choices a row in one process
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT; s=$(date +%s)
timeout 110 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --temperature 0.7 --top-p 0.9 --out $OUT/paired-t07 --work /tmp/cellspec-gpu > $OUT/paired-t07.log 2>&1; echo "t07 paired rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/paired-t07.log
s=$(date +%s); timeout 100 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --temperature 0.7 --top-p 0.9 --tree-nodes 15:4,15 --out $OUT/t07-choices --work /tmp/cellspec-gpu > $OUT/t07-choices.log 2>&1; echo "t07 choices rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/t07-choices.log
