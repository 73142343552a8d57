# 2026-12-07 (twenty-first sitting), the call after staging (bash .gpu/q0..q15/recv.sh),
# carrying [".gpu/fin", ".gpu/ort-include", ".gpu/plugin4"] (.gpu/plugin4: the plugin for HEAD's
# source, built on the CPU with nvcc -O3 -arch=sm_90). On an H200: plain against trees of 15 on
# the real SmolLM2 float16, three runs (issue 9's 2.5x on the issue's card). On any card: shapes
# A and B at 1,024 cells chained (issue 8's B against its floor), then B's and A's kernels one by
# one with plain launches (where B's time over its floor goes with today's kernels).
# (Call 18 ran it without the $SECONDS guard on the kernels, added after for a shorter H200 call.)
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP CELLSPEC_CUDA_EARLY_WEIGHTS; mkdir -p $OUT
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin4/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
case "$GPU" in *H200*)
  s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
  for run in 1 2 3; do s=$(date +%s)
    timeout 60 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $run rc=$? $(( $(date +%s) - s )) s"
    cat /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-400; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
  done;;
esac
s=$(date +%s); timeout 100 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --out /tmp/steps > /tmp/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
grep step_ms /tmp/steps.log >> $OUT/steps.log; python3 tools/gpu_bench.py summarize /tmp/steps.log | cut -c1-200
[ $SECONDS -lt 200 ] && s=$(date +%s) && CELLSPEC_CUDA_OVERLAP=0 timeout 150 python3 tools/gpu_bench.py kernels --shapes B,A --batches 1 --widths 1,16 --context 1024 --steps 16 --out /tmp/kern > $OUT/kernels.log 2>&1; echo "kernels rc=$? $(( $(date +%s) - s )) s"
[ -f $OUT/kernels.log ] && cut -c1-150 $OUT/kernels.log | grep -v "No registered" | head -70
