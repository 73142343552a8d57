# 2026-12-06 (second sitting), call 6 (after staging; meant for an H200): 5-chained-steps.sh's
# steps, then plain against speculative paired, free and pinned to two cores in turn (on the
# H200 this morning the host probe ranged 3.3-6.5 ms between processes and the ratio with it)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); timeout 170 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 1,16 --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log | cut -c1-330
P="tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in free1 pinned1 free2 pinned2; do s=$(date +%s)
  case $run in pinned*) pre="taskset -c 2,3";; *) pre="";; esac
  timeout 100 $pre python3 $P --out $OUT/$run > $OUT/$run.log 2>&1; echo "$run rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300
done
