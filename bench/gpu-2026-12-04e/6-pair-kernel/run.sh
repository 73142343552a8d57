set -u
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
cp .gpu/probe/w9.sh $OUT/run.sh
ROOT=$PWD
W=/tmp/cellspec-gpu
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
echo "== op tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 | tee $OUT/op_tests.log | tail -3
grep -q " passed" $OUT/op_tests.log && ! grep -q "failed\|error" $OUT/op_tests.log || exit 5
echo "== kernels A, 256 cells: two kernels, then one"
for pk in 0 1; do
  CELLSPEC_CUDA_PAIR_KERNEL=$pk CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell timeout 60 python3 tools/gpu_bench.py kernels --shapes A \
    --batches 1 --widths 1,16 --context 256 --steps 16 --out $OUT/kernels-pair$pk --work $W > $OUT/kernels-pair$pk.log 2>&1
  python3 .gpu/probe/summ.py $OUT/kernels-pair$pk/kernels.json | grep -v "x1 " | head -16
done
summary() { python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{')]
for r in rows:
    print(' ', 'spec' if r['speculation'] else 'plain', r['batch'], r['temperature'], round(r['tokens_per_s'], 1), r.get('tau'), 'round', r.get('round_ms'), 'host', round(r['host_probe_ms'], 2))
" $1; }
for k in 1 2; do for pk in 0 1; do
  echo "== real SmolLM2 greedy, pair kernel $pk ($k)"
  CELLSPEC_CUDA_PAIR_KERNEL=$pk CELLSPEC_CUDA_ATTENTION=cell timeout 60 python3 tools/gpu_bench.py smollm2 --dtype float16 \
    --draft cellspec/drafts/smollm2-135m-instruct --batches 1 --tokens 96 --out $OUT/real-pair$pk-$k --work $W > $OUT/real-pair$pk-$k.log 2>&1
  summary $OUT/real-pair$pk-$k.log
done; done
echo "== GPU model tests with CellAttention"
CELLSPEC_DRAFT=cellspec/drafts/smollm2-135m-instruct timeout ${SUITE_S:-170} python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k "cell or tree or walked or grown" 2>&1 | tee $OUT/gpu_tests.log | tail -3
