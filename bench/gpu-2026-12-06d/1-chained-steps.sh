# 2026-12-06 (fourth sitting): run again as bench/gpu-2026-12-06c/ had it (first H100 of the sitting)
# 2026-12-06 (third sitting), call 1 after staging: the plugin built, then shapes A and B at
# batch 1 and 8, one `execute` a step against chains of 16 timed as the caller sees each token
# (bench/gpu-2026-12-06b/6-chained-pinned.sh's first half, split so that each call stays
# under the 600 s a call may run)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node[0-9]" ; nproc
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 200 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 1,16 --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log | cut -c1-330
