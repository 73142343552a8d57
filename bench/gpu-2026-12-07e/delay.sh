# 2026-12-07 (sixteenth sitting), second machine: how a round follows the host's time.
#   bash bench/gpu-2026-12-07e/delay.sh   after staging (bash .gpu/q0..q15/recv.sh), carrying
#       [".gpu/fin", ".gpu/ort-include"]: install, plugin build, export, host_delay.py, then the
#       device's timeline of a round with ONNX Runtime's graphs and with the engine's own.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 200 python3 bench/gpu-2026-12-07e/host_delay.py $ART 12 8 > $OUT/delay.log 2>$OUT/delay.err; echo "delay rc=$? $(( $(date +%s) - s )) s"
grep summary $OUT/delay.log | cut -c1-900; tail -2 $OUT/delay.err | cut -c1-300
for m in ort own; do s=$(date +%s)
  CELLSPEC_CUDA_GRAPHS=$m timeout 100 python3 tools/cycle_timeline.py --draft cellspec/drafts/smollm2-135m-instruct --prompts 16 > $OUT/tl-$m.log 2>&1; echo "timeline $m rc=$? $(( $(date +%s) - s )) s"
  grep '^{' $OUT/tl-$m.log | cut -c1-330
done
