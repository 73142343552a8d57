# eighteenth sitting (an H100 lent; no H200), call 1 (with the GGUF's last part): the plugin built from main (7e7d86b's
# combine_chunks, not yet run on a GPU), CellAttention's GPU tests (rerun with the tensor-core
# chunk on too), then the real SmolLM2 float16 paired plain vs speculative at 256-token answers,
# the speculative side in chains of 7 going on with 8 looked-up tokens
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1; mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell D=cellspec/drafts/smollm2-135m-instruct
timeout 120 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py > $OUT/cell_tests.log 2>&1
tail -1 $OUT/cell_tests.log; grep -E "^FAILED|^ERROR" $OUT/cell_tests.log | head
timeout 200 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 256 --prompts 64 --paired --lookup-tokens 8 --out $OUT/paired256-lookup --work /tmp/cellspec-gpu > $OUT/paired256-lookup.log 2>&1
echo rc=$?; grep -v "plugin EP" $OUT/paired256-lookup.log | tail -3 | cut -c1-600
# the same with the LLM's defaults (trees of 15), for a baseline on this machine
timeout 190 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 256 --prompts 64 --paired --out $OUT/paired256-trees --work /tmp/cellspec-gpu > $OUT/paired256-trees.log 2>&1
echo rc=$?; grep -v "plugin EP" $OUT/paired256-trees.log | tail -3 | cut -c1-600
