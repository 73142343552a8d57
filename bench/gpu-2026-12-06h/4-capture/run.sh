# 2026-12-06 (eighth sitting), after staging: the round-capture probe, twice; then the device's
# own timeline of the real SmolLM2's speculative rounds and plain steps (tools/cycle_timeline.py)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do timeout 120 python3 bench/gpu-2026-12-06h/4-capture/capture_probe.py > $OUT/probe$i.log 2>&1; echo "probe rc=$?"; tail -5 $OUT/probe$i.log; done
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
timeout 150 python3 tools/cycle_timeline.py --draft cellspec/drafts/smollm2-135m-instruct --prompts 8 --orders walk,walk --plain --work /tmp/cellspec-gpu --out $OUT/timeline.json > $OUT/timeline.log 2>&1; echo "timeline rc=$?"; grep "^{" $OUT/timeline.log | cut -c1-600
