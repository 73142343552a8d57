# the real SmolLM2 float16, paired plain vs speculative at 256-token answers (64 held-out
# prompts, batch 1): chains of 7 going on with 8 looked-up tokens, then the default trees again
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell D=cellspec/drafts/smollm2-135m-instruct
timeout 240 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 256 --prompts 64 --paired --lookup-tokens 8 --out $OUT/paired256-lookup --work /tmp/cellspec-gpu > $OUT/paired256-lookup.log 2>&1
grep -v "plugin EP" $OUT/paired256-lookup.log | tail -3
timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 256 --prompts 64 --paired --out $OUT/paired256-trees --work /tmp/cellspec-gpu > $OUT/paired256-trees.log 2>&1
grep -v "plugin EP" $OUT/paired256-trees.log | tail -3
