# 2026-12-07 (sixteenth sitting), third machine: every device operation of a round on the clock.
#   bash bench/gpu-2026-12-07e/ops.sh   after staging (bash .gpu/q0..q15/recv.sh), carrying
#       [".gpu/fin", ".gpu/ort-include"]: install, plugin build, export, op_timeline.py with
#       ONNX Runtime's graphs and with the engine's own, twice each; the built plugin library comes
#       back (a later machine of the kind can take it into its cache and skip the build).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; cp ~/.cache/cellspec/plugins/libcellspec_cuda-*.so $OUT/; ls -la $OUT
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
for m in ort own ort own; do s=$(date +%s)
  CELLSPEC_CUDA_GRAPHS=$m timeout 100 python3 bench/gpu-2026-12-07e/op_timeline.py $ART 16 128 >> $OUT/ops-$m.log 2>$OUT/ops-$m.err; echo "ops $m rc=$? $(( $(date +%s) - s )) s"
  tail -1 $OUT/ops-$m.log | cut -c1-700; grep -v "No registered plugin" $OUT/ops-$m.err | tail -3 | cut -c1-300
done
