# 2026-12-07 (nineteenth sitting), prepared for an H200 after staging (bash .gpu/q0..q15/recv.sh),
# carrying [".gpu/fin", ".gpu/ort-include", ".gpu/plugin4"] (.gpu/plugin4: the plugin for HEAD's
# source built on the CPU with nvcc -arch=sm_90): plain against trees of 15 on the real SmolLM2
# float16, three runs (issue 9's 2.5x on the H200), then shapes A and B at 1,024 cells (issue 8's
# B against its floor).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin4/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
for run in 1 2 3; do s=$(date +%s)
  timeout 60 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $run rc=$? $(( $(date +%s) - s )) s"
  cat /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-400; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
s=$(date +%s); timeout 100 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --out /tmp/steps > /tmp/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
grep step_ms /tmp/steps.log >> $OUT/steps.log; python3 tools/gpu_bench.py summarize /tmp/steps.log | cut -c1-200
