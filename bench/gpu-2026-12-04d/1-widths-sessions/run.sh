set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
W=/tmp/cellspec-gpu
git log --oneline -1 2>/dev/null
python3 -m cellspec.plugins.build 2>&1 | tail -1
echo "== kernels, launches plain"
CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell timeout 240 python3 tools/gpu_bench.py kernels \
  --shapes A --batches 1,2 --widths 1,16,32 --steps 16 --out $OUT/kernels --work $W 2>&1 \
  | grep -v "plugin EP" | grep -v "^    " | cut -c1-200 | tail -12
python3 .gpu/probe/summ.py $OUT/kernels/kernels.json
echo "== real SmolLM2, trees at 4 and 8 sessions"
CELLSPEC_CUDA_ATTENTION=cell timeout 300 python3 tools/gpu_bench.py smollm2 --dtype float16 \
  --draft cellspec/drafts/smollm2-135m-instruct --batches 4,8 --tokens 96 --max-spec-batch 8 \
  --max-verify-rows 16,32 --out $OUT/sessions --work $W 2>&1 | grep -v "plugin EP" | cut -c1-220 | tail -30
