# 2026-12-06, call 5 (after staging): where the H200's host spends a speculative round. The real
# SmolLM2 float16, trees of 15 (the defaults), 32 held-out prompts, 256-token greedy answers, batch 1,
# the whole process under cProfile (plain chains run first in the same process; the .prof file is
# read back here with pstats, the rounds' share from DFlashExecutor.execute's callees)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); timeout 300 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 32 --tree-nodes 15 --out $OUT/warm --work /tmp/cellspec-gpu > $OUT/warm.log 2>&1; echo "warm rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/warm.log | grep speculation=True | cut -c1-400
s=$(date +%s); timeout 300 python3 -m cProfile -o $OUT/spec.prof tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 32 --tree-nodes 15 --out $OUT/prof --work /tmp/cellspec-gpu > $OUT/prof.log 2>&1; echo "prof rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/prof.log | grep speculation=True | cut -c1-400
python3 -c "import pstats; pstats.Stats('$OUT/spec.prof').sort_stats('tottime').print_stats(40)" | tail -50
