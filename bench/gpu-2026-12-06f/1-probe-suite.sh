# 2026-12-06 (sixth sitting), call 1 after staging: (1) tools/wgmma_probe.cu: does a Hopper wgmma
# k16 step give mma.sync's float32 bit for bit (the question before wgmma prompt tiles); (2) shape
# B's prompts with CellAttention's tensor-core chunk (CELLSPEC_CUDA_MMA_ATTENTION=1) against the
# default pair/chunk kernels, alternating, one process each; (3) the GPU suite on e11e12a's
# refactor of the RowMatMul kernels (never run on a GPU before).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_ATTENTION CELLSPEC_CUDA_MMA_ATTENTION; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a tools/wgmma_probe.cu -o /tmp/wgmma_probe > $OUT/probe.log 2>&1 && timeout 60 /tmp/wgmma_probe >> $OUT/probe.log 2>&1; echo "probe rc=$? $(( $(date +%s) - s )) s"; cat $OUT/probe.log
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
for run in mma1 mma0 mma1 mma0; do s=$(date +%s)
  CELLSPEC_CUDA_ATTENTION=cell CELLSPEC_CUDA_MMA_ATTENTION=${run#mma} timeout 100 python3 bench/gpu-2026-12-06d/prefill_b.py /tmp/pb $run >> $OUT/prefill.jsonl 2>> $OUT/stderr.log; echo "$run rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT/prefill.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["label"], r["kind"], r.get("tokens", r.get("context")), "ms %.2f best %.2f probe %.1f" % (r["ms"], r["best_ms"], r["probe_ms"]))
PY
grep -v "No registered plugin EP" $OUT/stderr.log | tail -3
s=$(date +%s); timeout 240 python3 -m pytest -q -p no:randomly -m gpu tests/gpu > $OUT/suite.log 2>&1; echo "suite rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/suite.log
