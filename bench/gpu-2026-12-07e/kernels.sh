# 2026-12-07 (sixteenth sitting), fourth machine: the tree kernels on shared memory.
#   bash bench/gpu-2026-12-07e/kernels.sh   after staging (bash .gpu/q0..q15/recv.sh), carrying
#       [".gpu/fin", ".gpu/ort-include", ".gpu/plugin"] (.gpu/plugin: the CellAttention library
#       ops.sh brought back, for the same source: no build): install, export, the tree kernels'
#       GPU tests and a lone session's tree cycles against plain decoding, op_timeline.py twice,
#       then plain against trees of 15 (trees_ab.py) twice.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 200 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "on_the_device or lone_sessions_tree" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/tests.log
grep -E "^(FAILED|ERROR|E )" $OUT/tests.log | head -8 | cut -c1-300
for i in 1 2; do
  timeout 100 python3 bench/gpu-2026-12-07e/op_timeline.py $ART 16 128 >> $OUT/ops.log 2>/tmp/ops.err; echo "ops rc=$?"; tail -1 $OUT/ops.log | cut -c1-700
done
for run in ab1 ab2; do s=$(date +%s)
  timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > $OUT/$run.log 2>/tmp/$run.err; echo "$run rc=$? $(( $(date +%s) - s )) s"
  grep summary $OUT/$run.log | cut -c1-500; grep -v "No registered" /tmp/$run.err | tail -2 | cut -c1-300
done
