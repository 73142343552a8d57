# 2026-12-07 (eighteenth sitting), call 1 after staging (bash .gpu/q0..q15/recv.sh), carrying
# [".gpu/fin", ".gpu/ort-include", ".gpu/plugin2"]: the overlapped builds of pair_kernel and
# mma_chunk_kernel reading their cells, mask bits and positions before they wait for the step's
# previous kernel, and fetching their cells' key and value rows into L1 then
# (CELLSPEC_CUDA_PREFETCH_CELLS=0: no fetch, the same build). The plugin built on the CPU (nvcc
# -arch=sm_90, 76 s) and carried in .gpu/plugin2. Op tests and the runtime's device tests, then
# a round's operations on the device's clock (op_timeline.py) and plain against trees of 15
# (trees_ab.py), the two settings alternating.
# (CELLSPEC_CUDA_PREFETCH_CELLS and the fetch it switched were removed after these calls: bench/NOTES.md,
# 2026-12-07, eighteenth sitting.)
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP CELLSPEC_CUDA_PREFETCH_CELLS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin2/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 150 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "pair_a_block or alone or verified or reference or tensor_core" > $OUT/op-tests.log 2>&1; echo "op tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/op-tests.log
s=$(date +%s); timeout 150 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "on_the_device or lone_sessions_tree or speculat or captured" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/tests.log
grep -hE "^(FAILED|ERROR|E )" $OUT/op-tests.log $OUT/tests.log | head -8 | cut -c1-300
for arm in 0 1 0 1; do
  CELLSPEC_CUDA_PREFETCH_CELLS=$arm timeout 100 python3 bench/gpu-2026-12-07e/op_timeline.py $ART 16 128 > /tmp/ops.out 2>/tmp/ops.err; echo "ops prefetch=$arm rc=$?"
  tail -1 /tmp/ops.out | sed "s/^/prefetch=$arm /" >> $OUT/ops.log; tail -1 $OUT/ops.log | cut -c1-420
done
for arm in 1 0 1 0; do s=$(date +%s)
  CELLSPEC_CUDA_PREFETCH_CELLS=$arm timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab prefetch=$arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/prefetch=$arm /" /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-600; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
