# twenty-first sitting, call 3 (with the GGUF's last part): the real SmolLM2 float16 with its
# shipped draft, 64 held-out prompts, 256-token greedy answers, batch 1, plain against trees of 15
# (4 choices a row, the default) and trees of first choices (15:1), one process
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
L=$OUT/smollm2.log; s=$(date +%s)
timeout 400 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --tree-nodes 15,15:1 --out $OUT/smollm2 --work /tmp/cellspec-gpu > $L 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $L
grep -v "plugin EP" $L | tail -12 | cut -c1-700
