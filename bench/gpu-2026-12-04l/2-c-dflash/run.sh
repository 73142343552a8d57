# twelfth sitting, call 2: a DFlash cycle (random 5-layer draft, block 16, 15 proposals) against a plain step on
# shape C, batch 1 and 8, CellAttention + RowMatMul; reuses call 1's export in /tmp/cw.
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1
mkdir -p $OUT; cp .gpu/probe/c2.sh $OUT/run.sh
ls /tmp/cw > $OUT/work.txt 2>&1
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
s=$(date +%s)
timeout 560 python3 tools/gpu_bench.py dflash --shape C --context 1024 --out $OUT/c-dflash --work /tmp/cw \
  > $OUT/c-dflash.log 2>&1
echo "rc=$? $(( $(date +%s) - s )) s" >> $OUT/c-dflash.log
grep -v 'plugin EP' $OUT/c-dflash.log | grep '^{' | cut -c1-700
tail -2 $OUT/c-dflash.log | cut -c1-300
