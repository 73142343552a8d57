# 2026-12-07 (seventeenth sitting), third machine: the kernels of a round and of a plain step
# (verify_kernels.py, torch's profiler), and where the card is an H200, plain against trees of
# 15 four times (issue 9's 2.5x on the H200).
#   bash bench/gpu-2026-12-07f/kernels_h200.sh   after staging (bash .gpu/q0..q15/recv.sh),
#       carrying [".gpu/fin", ".gpu/ort-include", ".gpu/plugin"].
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 150 python3 bench/gpu-2026-12-07f/verify_kernels.py $ART 4 128 > $OUT/kernels.log 2>$OUT/kernels.err; echo "kernels rc=$? $(( $(date +%s) - s )) s"
grep '"arm"' $OUT/kernels.log; head -c 3000 $OUT/kernels.log | grep -v '"arm"' | head -12 | cut -c1-200; grep -v "No registered\|USDT" $OUT/kernels.err | tail -3 | cut -c1-300
case "$card" in *H200*)
  for run in ab1 ab2 ab3 ab4; do s=$(date +%s)
    timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > $OUT/$run.log 2>/tmp/$run.err; echo "$run rc=$? $(( $(date +%s) - s )) s"
    grep summary $OUT/$run.log | cut -c1-400
  done ;;
esac
