# twenty-first sitting, call 5 (the same machine): the real SmolLM2 float16, plain against the
# LLM's defaults (trees of 15, 4 choices a row) side by side (--paired), two processes
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
for i in 1 2; do python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --out $OUT/paired$i --work /tmp/cellspec-gpu > $OUT/paired$i.log 2>&1; echo rc=$?; grep "^{" $OUT/paired$i.log | cut -c1-420; done
