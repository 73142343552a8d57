source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
export CELLSPEC_CUDA_ATTENTION=cell
D=cellspec/drafts/smollm2-135m-instruct
CELLSPEC_DRAFT=$D timeout 200 python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py -k "cell or tree or walked or grown" > $OUT/gpu_tests.log 2>&1; tail -2 $OUT/gpu_tests.log
python3 tools/gpu_bench.py smollm2 --dtype float16 --draft $D --batches 1 --tokens 96 --out $OUT/bench --work /tmp/cellspec-gpu 2>&1 | grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); print(r['speculation'], r.get('order'), r['batch'], round(r['tokens_per_s'],1), r.get('tau'), r.get('round_ms'), r.get('host_probe_ms'))"
