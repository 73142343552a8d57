set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w1.sh $OUT/run.sh
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
echo "== launch cost"
python3 .gpu/probe/launch_cost.py 2>&1 | tee $OUT/launch_cost.txt
echo "== whole GPU suite"
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 420 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 | tee $OUT/gpu_tests.log | tail -4
