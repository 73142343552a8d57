# 2026-12-06 (ninth sitting), call 1 after staging (bash .gpu/q0..q15/recv.sh), carrying
# [".gpu/fin", ".gpu/ort-include"]: the last part installed, the plugin built, then plain
# against speculative paired, free and pinned to cores 2-3 (bench/gpu-2026-12-06c/2-pinned-pairs.sh).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo fin rc=$?; tail -3 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
lscpu | grep -E "Model name|^CPU\(s\)"
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
RUNS="free1 pinned1" bash bench/gpu-2026-12-06c/2-pinned-pairs.sh
