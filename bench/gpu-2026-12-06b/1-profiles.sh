# 2026-12-06 (second sitting), call 1 (after staging): where the host spends a speculative round
# and a plain step on the device. The real SmolLM2 float16 with the defaults (trees of 15), plain
# against speculative paired (warms the plugin's build and the export), then the speculative
# process under cProfile (32 held-out prompts, 256-token greedy answers, batch 1), then shape A's
# whole steps (token to the host each step) at batch 1 with `--profile`. The .prof files are read
# back with pstats (callees of DFlashExecutor.execute and Executor.execute)
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
D="--dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --work /tmp/cellspec-gpu"
s=$(date +%s); timeout 220 python3 tools/gpu_bench.py smollm2 $D --prompts 64 --paired --out $OUT/paired > $OUT/paired.log 2>&1; echo "paired rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/paired.log | grep spec_over | cut -c1-300
s=$(date +%s); timeout 160 python3 -m cProfile -o $OUT/spec.prof tools/gpu_bench.py smollm2 $D --prompts 32 --tree-nodes 15 --out $OUT/prof > $OUT/prof.log 2>&1; echo "prof rc=$? $(( $(date +%s) - s )) s"; python3 tools/gpu_bench.py summarize $OUT/prof.log | grep "speculation=" | cut -c1-300
s=$(date +%s); timeout 120 python3 tools/gpu_bench.py steps --shapes A --batches 1 --chains 1 --profile --out $OUT/steps > $OUT/steps.log 2>&1; echo "steps rc=$? $(( $(date +%s) - s )) s"
python3 tools/gpu_bench.py summarize $OUT/steps.log | cut -c1-300; ls $OUT/steps* | head
