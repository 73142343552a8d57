# 2026-12-07 (twentieth sitting), the call after staging (bash .gpu/q0..q15/recv.sh), carrying
# [".gpu/fin", ".gpu/ort-include", ".gpu/plugin5"] (.gpu/plugin5: the plugin for this tree's
# source, built on the CPU with nvcc -O3 -arch=sm_90). CELLSPEC_CUDA_EARLY_WEIGHTS=budget (an
# overlapped projection fetches up to half of L2 of its weights before its wait, instead of its
# first loads) against the default: RowMatMul's op tests under it, then shapes A and B (1,024
# cells, batch 1 and 8, chains of 16) alternating. First, plain against trees of 15 on the
# real SmolLM2 float16 at the default (issue 9's ratio).
# (The source measured: 0b8bc09, whose change is now early-weights-budget.patch here: reverted after.)
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_WGMMA CELLSPEC_CUDA_GRAPHS CELLSPEC_CUDA_OVERLAP CELLSPEC_CUDA_EARLY_WEIGHTS; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
mkdir -p ~/.cache/cellspec/plugins && cp .gpu/plugin5/*.so ~/.cache/cellspec/plugins/
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
s=$(date +%s); python3 -m cellspec.plugins.build > /tmp/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; tail -1 /tmp/build.log
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > /tmp/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
for run in 1 2 3; do s=$(date +%s)
  timeout 60 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $run rc=$? $(( $(date +%s) - s )) s"
  cat /tmp/ab.out >> $OUT/ab.log; grep summary /tmp/ab.out | cut -c1-400; grep -v "No registered" /tmp/ab.err | tail -2 | cut -c1-300
done
s=$(date +%s); CELLSPEC_CUDA_EARLY_WEIGHTS=budget timeout 120 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "row_matmul or row_matmuls" > $OUT/op-tests-budget.log 2>&1; echo "op tests (budget) rc=$? $(( $(date +%s) - s )) s"; tail -1 $OUT/op-tests-budget.log
grep -hE "^(FAILED|ERROR|E )" $OUT/op-tests-budget.log | head -6 | cut -c1-300
for arm in first budget first budget; do s=$(date +%s); [ $SECONDS -gt 470 ] && break
  CELLSPEC_CUDA_EARLY_WEIGHTS=$arm timeout 90 python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8 --chains 16 --out /tmp/steps-$arm > /tmp/steps.log 2>&1; echo "steps $arm rc=$? $(( $(date +%s) - s )) s"
  sed "s/^/$arm /" /tmp/steps.log | grep step_ms >> $OUT/steps.log; python3 tools/gpu_bench.py summarize /tmp/steps.log | cut -c1-200
done
