# eighteenth sitting, call 3 (an H200 this time; 175 s of device time left after staging): the
# draft's graphs on ONNX Runtime's MatMuls (CELLSPEC_CUDA_DRAFT_PROJECTIONS=cublas, the target's
# on RowMatMul): its GPU test only. Run with the GGUF's last part as one call:
bash .gpu/sm2/recv.sh >/dev/null && source /tmp/gpusite/env.sh && export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 && mkdir -p $OUT && (python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }) && timeout 140 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k draft_on_cublas -rA > $OUT/test.log 2>&1; echo rc=$?; grep -E "passed|failed|^FAILED|^PASSED|^ERROR" $OUT/test.log | tail -8
# next (not run: no device time left): a DFlash cycle on B with the draft on each, in turn
# export CELLSPEC_CUDA_ATTENTION=cell CELLSPEC_CUDA_MMA_ATTENTION=1
# for p in row cublas row cublas; do CELLSPEC_CUDA_DRAFT_PROJECTIONS=$p timeout 200 python3 tools/gpu_bench.py dflash --shape B --with-draft --out $OUT/b-$p-$RANDOM --work /tmp/cellspec-gpu; done
