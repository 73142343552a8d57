set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > /dev/null 2>&1
for k in 1 2; do for mode in default rows; do
  echo "== timeline, one head: $mode ($k)"
  CELLSPEC_CUDA_ONE_HEAD=$mode timeout 140 python3 tools/cycle_timeline.py --draft cellspec/drafts/smollm2-135m-instruct \
    --prompts 8 --orders walk --work /tmp/cellspec-timeline --out $OUT/timeline-$mode-$k.json 2>&1 \
    | grep -v "plugin EP" | grep "^{" | cut -c1-600
done; done
