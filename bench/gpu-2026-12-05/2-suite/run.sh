# the whole GPU suite on main (the plugin built first), CellAttention on; then the real SmolLM2
# float16 plain vs speculative side by side at 256-token answers (64 held-out prompts, batch 1)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout 330 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu --durations=5 > $OUT/gpu_suite.log 2>&1
tail -3 $OUT/gpu_suite.log; grep -E "^FAILED|^ERROR" $OUT/gpu_suite.log | head
timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --out $OUT/paired256 --work /tmp/cellspec-gpu > $OUT/paired256.log 2>&1
grep -v "plugin EP" $OUT/paired256.log | tail -4
