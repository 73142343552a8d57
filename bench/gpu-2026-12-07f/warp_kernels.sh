# 2026-12-07 (seventeenth sitting), second machine: the tree kernels as a warp (grow_trees' search
# by a shuffle reduction, walk_trees' by a ballot) against the commit before them (.gpu/base:
# `git archive 7fb8068 cellspec tools bench/gpu-2026-12-07e bench/gpu-2026-12-06j`, drafts left
# out).
#   bash bench/gpu-2026-12-07f/warp_kernels.sh   after staging (bash .gpu/q0..q15/recv.sh),
#       carrying [".gpu/fin", ".gpu/ort-include", ".gpu/plugin", ".gpu/base"]: install, export,
#       the tree kernels' GPU tests and tree speculation against plain, op_timeline.py base/new
#       alternating (three each), trees_ab.py plain,t15 new/base alternating (two each).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
cp -r cellspec/drafts/smollm2-135m-instruct .gpu/base/cellspec/drafts/
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); timeout 240 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "on_the_device or lone_sessions_tree or tree_speculation" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/tests.log
grep -E "^(FAILED|ERROR|E )" $OUT/tests.log | head -8 | cut -c1-300
for arm in ${OPS:-base new new base base new}; do
  case $arm in base) dir=.gpu/base;; *) dir=.;; esac
  (cd $dir && timeout 100 python3 bench/gpu-2026-12-07e/op_timeline.py $ART 16 128 > /tmp/ops.out 2>/tmp/ops.err); echo "ops $arm rc=$?"
  tail -1 /tmp/ops.out | sed "s/^/$arm /" >> $OUT/ops.log; tail -1 $OUT/ops.log | cut -c1-420
done
for arm in ${ABS:-new base base new}; do s=$(date +%s)
  case $arm in base) dir=.gpu/base;; *) dir=.;; esac
  (cd $dir && timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err); echo "ab $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-400; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
