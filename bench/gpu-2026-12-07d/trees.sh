# 2026-12-07 (fifteenth sitting): bench/gpu-2026-12-07c/trees.sh running this folder's
# trees_ab.py (decoding after each prompt's first token timed too). As the fourteenth sitting's:
# bench/gpu-2026-12-06j/1-trees/run.sh in shorter calls, each keeping what it finishes.
#   bash bench/gpu-2026-12-07d/trees.sh setup RUNS  after staging (bash .gpu/q0..q15/recv.sh),
#       carrying [".gpu/fin", ".gpu/ort-include"]: install, plugin build, export, then RUNS.
#   bash bench/gpu-2026-12-07d/trees.sh more RUNS   next, on the same machine, no carry.
# Each run: trees_ab.py, plain against trees of 15 interleaved, 12 blocks of 8 held-out prompts.
part=${1:?setup or more}; runs=${2:-ab1}
if [ "$part" = setup ]; then bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log; fi
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
if [ "$part" = setup ]; then
  s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
  s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
fi
for run in $runs; do s=$(date +%s)
  timeout 150 python3 bench/gpu-2026-12-07d/trees_ab.py $ART 12 8 plain,t15 > $OUT/$run.log 2>$OUT/$run.err; echo "$run rc=$? $(( $(date +%s) - s )) s"
  grep summary $OUT/$run.log | cut -c1-400; tail -2 $OUT/$run.err | cut -c1-300
done
