# RowMatMul's 32-row blocks (ROW_PAIR_ROWS) against the 16-row ones (-DROW_PAIR_ROWS=16)
source /tmp/gpusite/env.sh || exit 3
export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include
mkdir -p $OUT
WORK=/tmp/cellspec-gpu; SHIPPED=cellspec/drafts/smollm2-135m-instruct; mkdir -p $WORK
python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 4; }
nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -arch=native -I$CELLSPEC_ORT_INCLUDE \
    -DROW_PAIR_ROWS=16 cellspec/plugins/cell_attention.cu -o /tmp/cell-old.so || exit 5
python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 \
    | tail -2 | tee $OUT/cell_tests.log
python3 tools/gpu_bench.py projections --out $OUT/proj --shapes A,B --rows 1,16,24,32,64 \
    --variants "old=-DROW_PAIR_ROWS=16" --runs 10 2>&1 | grep '^{' > $OUT/projections.txt
python3 - $OUT/projections.txt <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["form"] != "cublas":
        pass
key = {}
for r in rows:
    key.setdefault((r["shape"], r["projection"], r["rows"]), {})[r["form"]] = r["us"]
for k, v in key.items():
    print(*k, {f: v[f] for f in ("cublas", "row-old", "row")})
PY
for r in 1 2; do
  for lib in new old; do
    L=$([ $lib = old ] && echo /tmp/cell-old.so)
    LIB=$L CELLSPEC_CUDA_ATTENTION=cell python3 .gpu/probe/with_lib.py smollm2 --dtype float16 \
        --draft $SHIPPED --batches 1,2 --tokens 96 --tree-nodes 15,31 --orders walk \
        --out $OUT/$lib-$r --work $WORK 2>&1 | grep "^{" | python3 -c "import json, sys
for line in sys.stdin:
    row = json.loads(line)
    calls = {k: (v['calls'], round(v['ms_per_call'], 3)) for k, v in row['ms_per_call'].items()
             if k.startswith('static')}
    print('$lib', {k: row.get(k) for k in ('speculation', 'tree_nodes', 'batch', 'tokens_per_s', 'tau', 'round_ms')}, calls)"
  done
done
