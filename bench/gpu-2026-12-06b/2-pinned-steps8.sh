# 2026-12-06 (second sitting), call 2 (the same H100 as call 1): three more plain/speculative
# pairs, pinned to two cores (taskset -c 2,3), free, pinned; then shape A's whole steps at batch 8
# with --profile (its .prof.txt was over the size that comes back)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
P="tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in pinned1 free2 pinned2; do s=$(date +%s)
  case $run in pinned*) pre="taskset -c 2,3";; *) pre="";; esac
  timeout 150 $pre python3 $P --out $OUT/$run > $OUT/$run.log 2>&1; echo "$run rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300
done
s=$(date +%s); timeout 150 python3 tools/gpu_bench.py steps --shapes A --batches 8 --chains 1 --profile --out $OUT/steps8 > $OUT/steps8.log 2>&1; echo "steps8 rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/steps8.log | cut -c1-300
