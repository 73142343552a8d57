# 2026-12-07 (sixteenth sitting): own CUDA graphs (CELLSPEC_CUDA_GRAPHS=own) against ONNX Runtime's.
#   bash bench/gpu-2026-12-07e/own.sh setup RUNS  after staging (bash .gpu/q0..q15/recv.sh),
#       carrying [".gpu/fin", ".gpu/ort-include"]: install, plugin build, export, the GPU test of
#       own graphs (tokens equal to ONNX Runtime's graphs'), then RUNS.
#   bash bench/gpu-2026-12-07e/own.sh more RUNS   next, on the same machine, no carry.
#   bash bench/gpu-2026-12-07e/own.sh suite       the runtime's GPU tests with CELLSPEC_CUDA_GRAPHS=own.
# Each run: trees_ab.py with arms plain, t15, plain@own, t15@own interleaved, 12 blocks of 8 held-out prompts.
part=${1:?setup, more or suite}; runs=${2:-ab1}
if [ "$part" = setup ]; then bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log; fi
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
if [ "$part" = setup ]; then
  s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
  s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
  s=$(date +%s); timeout 200 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k own_graphs > $OUT/test-own.log 2>&1; echo "test-own rc=$? $(( $(date +%s) - s )) s"; tail -2 $OUT/test-own.log | cut -c1-300
  grep -E "^(FAILED|ERROR|E )" $OUT/test-own.log | head -8 | cut -c1-300
fi
if [ "$part" = suite ]; then
  s=$(date +%s); CELLSPEC_CUDA_GRAPHS=own timeout 400 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py > $OUT/suite-own.log 2>&1; echo "suite rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/suite-own.log
  grep -E "^(FAILED|ERROR)" $OUT/suite-own.log | head -20; exit 0
fi
for run in $runs; do s=$(date +%s)
  timeout 200 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15,plain@own,t15@own > $OUT/$run.log 2>$OUT/$run.err; echo "$run rc=$? $(( $(date +%s) - s )) s"
  grep summary $OUT/$run.log | cut -c1-900; tail -2 $OUT/$run.err | cut -c1-300
done
