# twenty-third sitting, call 1 (after staging, the same machine): the real SmolLM2 float16, trees
# of 15 from each row's first 4 choices (the old TOP_K) against all 8 (format 4's TOP_K),
# interleaved in one process (tau is exact per setting; speed drifts within a process, so
# neighbours compare); then plain against the defaults side by side (--paired), two processes;
# then issue 8's host time a step on shape A at batch 1 and 8
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
s=$(date +%s)
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --tree-nodes ${TREES:-15:4,15,15:4,15} --out $OUT/choices --work /tmp/cellspec-gpu > $OUT/choices.log 2>&1; echo "choices rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/choices.log
for i in ${PAIRS:-1 2}; do s=$(date +%s)
  python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --out $OUT/paired$i --work /tmp/cellspec-gpu > $OUT/paired$i.log 2>&1; echo "paired$i rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/paired$i.log
done
s=$(date +%s); timeout 150 python3 tools/gpu_bench.py steps --shapes A --batches 1,8 --chains 1 --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log
