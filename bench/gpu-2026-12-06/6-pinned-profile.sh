# 2026-12-06, call 6 (after staging): is the H200's speculative round bound by where the host runs
# it? Plain against the defaults paired (as call 1), unpinned, then pinned to two cores (taskset -c
# 2,3), alternating; then the speculative process under cProfile (5-profile.sh's second half)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
P="tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in free1 pinned1 free2 pinned2; do s=$(date +%s)
  case $run in pinned*) pre="taskset -c 2,3";; *) pre="";; esac
  timeout 200 $pre python3 $P --out $OUT/$run > $OUT/$run.log 2>&1; echo "$run rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300
done
s=$(date +%s); timeout 200 python3 -m cProfile -o $OUT/spec.prof tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 32 --tree-nodes 15 --out $OUT/prof --work /tmp/cellspec-gpu > $OUT/prof.log 2>&1; echo "prof rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/prof.log | grep speculation=True | cut -c1-300
