# 2026-12-07 (nineteenth sitting), the call after staging (bash .gpu/q0..q15/recv.sh), carrying
# [".gpu/fin", ".gpu/ort-include", ".gpu/plugin3"]: .gpu/plugin3 holds the plugin built on the
# CPU (nvcc -arch=sm_90) for HEAD's source and for HEAD with chunk-reads-before-wait.patch (this folder; it
# was in bench/gpu-next/ when this ran).
# First the op tests and the runtime's device tests at HEAD (the eighteenth sitting's kept source,
# not run on a GPU after the fetch's removal); then the patched tree's op tests and shapes A and B
# (1,024 cells, batch 1 and 8, chains of 16), HEAD and patched alternating; then plain against
# trees of 15 on the real SmolLM2 at HEAD.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin3/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct; HEAD_TREE=$PWD; PT=/tmp/pt
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
OPK="pair_a_block or alone or verified or reference or tensor_core"
s=$(date +%s); timeout 150 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "$OPK" > $OUT/op-tests.log 2>&1; echo "op tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/op-tests.log
s=$(date +%s); timeout 120 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py -k "on_the_device or lone_sessions_tree" > $OUT/tests.log 2>&1; echo "tests rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/tests.log
grep -hE "^(FAILED|ERROR|E )" $OUT/op-tests.log $OUT/tests.log | head -8 | cut -c1-300
mkdir -p $PT && tar --exclude=./.gpu -cf - . | tar -C $PT -xf - && (cd $PT && patch -p1 < bench/gpu-2026-12-07h/chunk-reads-before-wait.patch) ; echo "patched rc=$?"
(cd $PT && PYTHONPATH=$PT:$PYTHONPATH python3 -m cellspec.plugins.build > /tmp/build-pt.log 2>&1; echo "build (patched) rc=$?"; tail -1 /tmp/build-pt.log)
s=$(date +%s); (cd $PT && PYTHONPATH=$PT:$PYTHONPATH timeout 150 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "$OPK" > $OUT/op-tests-patched.log 2>&1); echo "op tests (patched) rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/op-tests-patched.log
for arm in head patched head patched; do s=$(date +%s)
  case $arm in head) T=$HEAD_TREE;; *) T=$PT;; esac
  (cd $T && PYTHONPATH=$T:$PYTHONPATH timeout 100 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --out /tmp/steps-$arm > /tmp/steps.log 2>&1); echo "steps $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/steps.log | grep step_ms >> $OUT/steps.log; python3 tools/gpu_bench.py summarize /tmp/steps.log | cut -c1-200
done
for run in 1 2; do s=$(date +%s)
  timeout 100 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $run rc=$? $(( $(date +%s) - s )) s"
  cat /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-600; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
