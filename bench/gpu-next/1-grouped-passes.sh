# next sitting, call 1: CellAttention's tensor-core chunk in passes of agreeing rows
# (mma-grouped-passes.patch), tested and timed on shape B against the kernel without it, one call
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
export CELLSPEC_CUDA_ATTENTION=cell CELLSPEC_CUDA_MMA_ATTENTION=1
P=bench/gpu-2026-12-05f/mma-grouped-passes.patch
# SIDES="grouped" or "before" splits the two sides over two calls (each call gets a fresh copy of the tree)
apply() {  # apply [-R] [--check]: patch(1) where the machine has it, else git apply
  if command -v patch > /dev/null; then patch -p1 ${1:+-R} ${2:+--dry-run} < $P > /dev/null 2>&1
  else git apply ${1:+-R} ${2:+--check} $P; fi
}
for side in ${SIDES:-grouped before}; do
  if [ $side = grouped ]; then apply || exit 5
  elif apply -R check; then apply -R || exit 5; fi
  s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build-$side.log 2>&1 || { tail $OUT/build-$side.log; exit 4; }
  echo "$side: build $(( $(date +%s) - s )) s"
  if [ $side = grouped ]; then
    timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_cell_attention.py > $OUT/tests.log 2>&1
    echo "tests rc=$?"; tail -3 $OUT/tests.log
  fi
  L=$OUT/b-dflash-$side.log; s=$(date +%s)
  timeout 230 python3 tools/gpu_bench.py dflash --shape B --with-draft --context 1024 --batches 1 --tree-nodes 0,15:4 --out $OUT/b-dflash-$side --work /tmp/bw > $L 2>&1
  echo "rc=$? $(( $(date +%s) - s )) s" >> $L
  python3 tools/gpu_bench.py summarize $L
done
