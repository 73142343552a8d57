set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 560 \
  python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 | tee $OUT/gpu_tests.log | tail -3
