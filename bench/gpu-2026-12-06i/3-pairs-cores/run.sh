# 2026-12-06 (ninth sitting), call 3: six more pairs, pinned to cores 8-9 and 12-13 in turn
# (calls 1-2 pinned to 2-3), to see whether other cores steady the host.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
P="tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in c89a c1213a c89b c1213b c89c c1213c; do s=$(date +%s); case $run in c89*) pre="taskset -c 8,9";; *) pre="taskset -c 12,13";; esac
timeout 60 $pre python3 $P --out $OUT/$run > $OUT/$run.log 2>&1; echo "$run rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300; done; rm -rf $OUT/c*/
