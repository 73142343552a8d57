# 2026-12-06 (tenth sitting), call 1 after staging (bash .gpu/q0..q15/recv.sh), carrying
# [".gpu/fin", ".gpu/ort-include"]: the last part installed, the plugin built, the artifact
# exported as gpu_bench.py's smollm2 exports it, then trees of 15, 31 and
# 23 against plain interleaved in one process (trees_ab.py: 24 blocks of 8 held-out prompts,
# verifies of up to 32 rows), twice. Question: on a host whose Python sets the round, does a tree
# of 31 (tau +8% offline, the same host work a round on the CPU proxy) pay for its 32-row verify?
# Run as `TREES="ab1 ab2" BLOCKS=12 ARMS=plain,t15,t31 bash bench/gpu-2026-12-06j/1-trees/run.sh`
# (the device time left allowed no more); ../2-trees-more/ ran trees_ab.py twice more on the
# same machine, ARMS plain,t15,t23 and plain,t15,t31.
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo fin rc=$?; tail -3 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)"
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
s=$(date +%s); python3 -c "from argparse import Namespace; from pathlib import Path; from tools.gpu_bench import export_real; export_real(Namespace(work=Path('/tmp/cellspec-gpu'), dtype='float16', draft='cellspec/drafts/smollm2-135m-instruct'))" > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
for run in ${TREES:-ab1 ab2}; do s=$(date +%s)
  timeout 150 python3 bench/gpu-2026-12-06j/trees_ab.py $ART ${BLOCKS:-24} 8 ${ARMS:-plain,t15,t31,t23} > $OUT/$run.log 2>$OUT/$run.err; echo "$run rc=$? $(( $(date +%s) - s )) s"
  grep summary $OUT/$run.log; tail -2 $OUT/$run.err | cut -c1-300
done
