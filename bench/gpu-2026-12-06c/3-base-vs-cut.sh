# 2026-12-06 (third sitting): plain against speculative paired (the real SmolLM2 float16, 64
# held-out prompts, 256-token greedy answers, batch 1), the checkout with the round's host cuts
# ("cut") and main before them (.gpu/base = `git archive 5c9344c cellspec tools`) in turn, in
# one sitting on one machine. RUNS: the order (default cut1 base1 cut2 base2).
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1 CELLSPEC_CUDA_ATTENTION=cell; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
[ -n "${BUILD:-}" ] && { s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"; }
P="smollm2 --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 256 --prompts 64 --paired --work /tmp/cellspec-gpu"
for run in ${RUNS:-cut1 base1 cut2 base2}; do s=$(date +%s)
  case $run in base*) dir=.gpu/base;; *) dir=.;; esac
  (cd $dir && timeout ${LIMIT:-150} python3 tools/gpu_bench.py $P --out $OUT/$run > $OUT/$run.log 2>&1); echo "$run rc=$? $(( $(date +%s) - s )) s"
  python3 tools/gpu_bench.py summarize $OUT/$run.log | grep spec_over | cut -c1-300
done
