# Written 2026-12-06 (eleventh sitting), not yet run. The second call on the machine of
# 2-suite.sh: the artifact exported as gpu_bench.py's smollm2 exports it (float16, the shipped
# draft), then plain against trees of 15 (the defaults) interleaved in one process, RUNS times
# (../gpu-2026-12-06j/trees_ab.py: BLOCKS blocks of 8 held-out prompts, 256-token greedy
# answers, batch 1, each block after a host probe, the arms' order rotating). Issue 9's 2.5x on
# the H200, where the machine is one.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
for run in ${RUNS:-ab1 ab2 ab3 ab4}; do s=$(date +%s)
  timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART ${BLOCKS:-12} 8 plain,t15 > $OUT/$run.log 2>$OUT/$run.err; echo "$run rc=$? $(( $(date +%s) - s )) s"
  grep summary $OUT/$run.log; tail -2 $OUT/$run.err | cut -c1-300
done
