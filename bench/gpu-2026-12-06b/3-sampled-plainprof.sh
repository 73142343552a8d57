# 2026-12-06 (second sitting), call 3 (the same H100): plain/speculative paired at temperature
# 0.7 / top-p 0.9; then shape A's whole steps at batch 1 under cProfile (plain.prof)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
s=$(date +%s); timeout 150 python3 tools/gpu_bench.py smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --temperature 0.7 --top-p 0.9 --out $OUT/paired-t07 --work /tmp/cellspec-gpu > $OUT/paired-t07.log 2>&1; echo "t07 rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/paired-t07.log | grep spec_over | cut -c1-300
s=$(date +%s); timeout 120 python3 -m cProfile -o $OUT/plain.prof tools/gpu_bench.py steps --shapes A --batches 1 --chains 1 --out $OUT/steps1 > $OUT/steps1.log 2>&1; echo "steps1 rc=$? $(( $(date +%s) - s )) s"
