# Prepared in the sixth sitting (2026-12-06), not run: the device time ran out (four starts
# refused). For the next sitting, after staging (bench/gpu-next/README.md):
# row_wgmma_kernel (RowMatMul's prompt rows on Hopper's wgmma; the plugin built for sm_90a with
# CELLSPEC_CUDA_WGMMA=1) and CellAttention's tensor-core chunk by default for heads of 128. First
# tools/row_wgmma_check.cu (the kernels' bits and times without ONNX Runtime); then the plugin's
# prompt tests (every tiling: g, 4, 2, 0, the choice); shape B's prompts and decode steps with
# the new defaults against the old ones (row_wide_kernel 4 and the pair/chunk kernels), one
# process each; each projection of shapes A and B at 128-2,048 rows on every tiling in one
# process; with MMA_TESTS=1 the tensor-core chunk's test (=1 and =0). SKIP_CHECK=1 leaves out
# the check (already run from its prebuilt binary, .gpu/check).
bash .gpu/fin/recv.sh > /tmp/fin.log 2>&1; echo "fin rc=$?"; tail -1 /tmp/fin.log
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_ROW_WIDE CELLSPEC_CUDA_MMA_ATTENTION CELLSPEC_CUDA_ATTENTION; export CELLSPEC_CUDA_WGMMA=1; mkdir -p $OUT
nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader
[ -n "$SKIP_CHECK" ] || { s=$(date +%s); nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DCELLSPEC_WGMMA=1 -I$CELLSPEC_ORT_INCLUDE tools/row_wgmma_check.cu -o /tmp/row_wgmma_check -ldl > $OUT/check.log 2>&1 && timeout 120 /tmp/row_wgmma_check >> $OUT/check.log 2>&1; echo "check rc=$? $(( $(date +%s) - s )) s"; grep -v "warning\|Remark\|^ *\^\|^$" $OUT/check.log | cut -c1-200; }
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; cat $OUT/build.log | tail -3
s=$(date +%s); timeout 200 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "${ROW_TESTS:-prompts}" > $OUT/tests.log 2>&1; rc=$?; echo "tests rc=$rc $(( $(date +%s) - s )) s"; tail -3 $OUT/tests.log
[ $rc = 0 ] || { grep -B5 -A30 "Error\|assert" $OUT/tests.log | head -80; exit 1; }
for run in ${PREFILL_RUNS:-new old}; do s=$(date +%s)
  ( [ $run = old ] && export CELLSPEC_ROW_WIDE=4 CELLSPEC_CUDA_MMA_ATTENTION=0; CELLSPEC_CUDA_ATTENTION=cell timeout 90 python3 bench/gpu-2026-12-06d/prefill_b.py /tmp/pb $run >> $OUT/prefill.jsonl 2>> $OUT/stderr.log ); echo "$run rc=$? $(( $(date +%s) - s )) s"
done
python3 - $OUT/prefill.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(r["label"], r["kind"], r.get("tokens", r.get("context")), "ms %.2f best %.2f probe %.1f" % (r["ms"], r["best_ms"], r["probe_ms"]))
PY
s=$(date +%s); timeout 70 python3 tools/gpu_bench.py projections --out $OUT/proj --shapes A,B --rows 128,256,1024,2048 --repeat 4 --runs 5 --tilings choice,g,4,0 > $OUT/proj.log 2>&1; echo "proj rc=$? $(( $(date +%s) - s )) s"
python3 - $OUT/proj.log <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        rows.setdefault((r["shape"], r["projection"], r["rows"]), {})[r["form"]] = r["us"]
for key, f in rows.items():
    print(*key, " ".join("%s %.1f" % (k, v) for k, v in f.items()))
PY
[ -n "$MMA_TESTS" ] && { s=$(date +%s); timeout 150 python3 -m pytest -q -x -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "tensor_core" > $OUT/mma-tests.log 2>&1; echo "mma tests rc=$? $(( $(date +%s) - s )) s"; tail -2 $OUT/mma-tests.log; }
