# 2026-12-07 (twenty-first sitting): mma_chunk_kernel's kEarly build (a chunk's pool rows loaded
# before the wait, all four halves at once) against the plain build (CELLSPEC_CUDA_MMA_EARLY=0).
# After staging (bash .gpu/q0..q15/recv.sh), carrying [".gpu/fin", ".gpu/ort-include",
# ".gpu/plugin6"] (.gpu/plugin6: the plugin for this tree's source, built on the CPU with
# nvcc -O3 -arch=sm_90). `bash early.sh ops`: the op tests, then shapes A and B at 1,024 cells
# (chains of 16) with the two builds alternating, then B's kernels one by one with plain
# launches; `bash early.sh pipeline`: the GPU pipeline's exactness tests with every attention on
# the tensor-core chunk (so the early build runs SmolLM2's decode steps and verifies).
# Needs mma-early.patch applied (reverted after `ops` ran as call 35; `pipeline` never ran).
[ -d /tmp/gpusite ] || { bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log; }
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP CELLSPEC_CUDA_EARLY_WEIGHTS CELLSPEC_CUDA_MMA_EARLY; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin6/*.so ~/.cache/cellspec/plugins/
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
if [ "$1" = ops ]; then
  s=$(date +%s); timeout 200 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "early or four_heads or alone_in_a_batch or verified_key or wide_verify or tensor_core or matches_reference" > $OUT/op-tests.log 2>&1; echo "op tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/op-tests.log
  grep -hE "^(FAILED|ERROR|E )" $OUT/op-tests.log | head -8 | cut -c1-300
  for arm in 0 1 0 1; do s=$(date +%s); [ $SECONDS -gt 480 ] && break
    CELLSPEC_CUDA_MMA_EARLY=$arm timeout 90 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --out /tmp/steps-$arm > /tmp/steps.log 2>&1; echo "steps early=$arm rc=$? $(( $(date +%s) - s )) s"
    sed "s/^/early=$arm /" /tmp/steps.log | grep step_ms >> $OUT/steps.log; python3 tools/gpu_bench.py summarize /tmp/steps.log | cut -c1-160
  done
  for arm in 1 0; do [ $SECONDS -gt 520 ] && break
    CELLSPEC_CUDA_MMA_EARLY=$arm CELLSPEC_CUDA_OVERLAP=0 timeout 60 python3 tools/gpu_bench.py kernels --shapes B --batches 1 --widths 1 --context 1024 --steps 16 --out /tmp/kern > $OUT/kernels-early$arm.log 2>&1; echo "kernels early=$arm rc=$?"
    grep -E "wall_ms|mma_chunk|combine" $OUT/kernels-early$arm.log | cut -c1-150
  done
fi
if [ "$1" = pipeline ]; then
  s=$(date +%s); CELLSPEC_CUDA_MMA_ATTENTION=1 timeout 420 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "cell and (chains or batch_of_eight or speculation_equals_plain or replay)" > $OUT/pipeline-mma.log 2>&1; echo "pipeline (every attention on mma) rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/pipeline-mma.log
  grep -hE "^(FAILED|ERROR|E )" $OUT/pipeline-mma.log | head -8 | cut -c1-300
fi
