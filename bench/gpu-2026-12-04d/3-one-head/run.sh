set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
W=/tmp/cellspec-gpu
python3 -m cellspec.plugins.build 2>&1 | tail -1
for mode in default rows; do
  echo "== kernels, one head: $mode"
  CELLSPEC_CUDA_ONE_HEAD=$mode CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell timeout 200 \
    python3 tools/gpu_bench.py kernels --shapes A --batches 1,2 --widths 8,16 --context 256 \
    --steps 16 --out $OUT/kernels-$mode --work $W 2>&1 | grep '^{' | cut -c1-200
  python3 .gpu/probe/summ.py $OUT/kernels-$mode/kernels.json | grep -A1 "width\|chunk_kernel" | grep "width\|chunk"
done
echo "== op tests with one head on every step"
CELLSPEC_CUDA_ONE_HEAD=rows timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 | tail -2
for round in 1 2; do
for mode in default rows; do
  echo "== real SmolLM2, one head: $mode (round $round)"
  CELLSPEC_CUDA_ONE_HEAD=$mode CELLSPEC_CUDA_ATTENTION=cell timeout 200 python3 tools/gpu_bench.py smollm2 \
    --dtype float16 --draft cellspec/drafts/smollm2-135m-instruct --batches 1,2 --tokens 96 \
    --out $OUT/real-$mode-$round --work $W 2>&1 | grep '^{' | python3 -c "
import json, sys
for line in sys.stdin:
    try: r = json.loads(line)
    except Exception: continue
    print(r['speculation'], r['batch'], r.get('tree_nodes'), r.get('max_verify_rows'), round(r['tokens_per_s'], 1), r.get('tau'))
"
done
done
