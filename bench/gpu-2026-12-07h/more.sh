# 2026-12-07 (nineteenth sitting), calls 23-25 on the same H100 after work.sh (no carry): the rest
# of the GPU suite at HEAD (every file but test_cell_attention.py, then that file's tests work.sh
# left out), then four more runs of plain against trees of 15.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
s=$(date +%s); timeout 420 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/ --deselect tests/gpu/test_cell_attention.py > $OUT/suite-rest.log 2>&1; echo "rc=$? $(( $(date +%s) - s )) s"; tail -3 $OUT/suite-rest.log
s=$(date +%s); timeout 300 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_cell_attention.py -k "not (pair_a_block or alone or verified or reference or tensor_core)" > $OUT/kernels-rest.log 2>&1; echo "rc=$? $(( $(date +%s) - s )) s"; tail -2 $OUT/kernels-rest.log
ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
for run in 3 4 5 6; do timeout 60 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > /tmp/ab.out 2>/tmp/ab.err; echo "ab $run rc=$?"; cat /tmp/ab.out >> $OUT/ab-more.log; grep summary /tmp/ab.out | cut -c1-400; done
