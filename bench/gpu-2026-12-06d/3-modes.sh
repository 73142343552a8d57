# 2026-12-06 (fourth sitting), call 3 after staging: should ort-cuda run CellAttention by
# default? The real SmolLM2 float16 with the shipped draft (max_context 2048): time to a
# prompt's first token at 32-1,900 tokens and tokens/s plain and speculative at batch 1 and 16,
# one process per mode (modes.py), decomposed and cell alternating, and one with the variable
# unset (the new default: cell where the library builds).
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
nvidia-smi --query-gpu=name --format=csv,noheader
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - s )) s"
ART=/tmp/cellspec-gpu/smollm2-f16-2048
s=$(date +%s); python3 -c "
from pathlib import Path
from cellspec.export import ExportConfig, export
from cellspec.export.gguf import find_bundled_gguf
export(find_bundled_gguf(), Path('$ART'), ExportConfig(dtype='float16', max_context=2048), progress=False, draft='cellspec/drafts/smollm2-135m-instruct')
" > $OUT/export.log 2>&1; echo "export rc=$? $(( $(date +%s) - s )) s"
for run in decomposed cell unset decomposed cell; do s=$(date +%s)
  if [ $run = unset ]; then unset CELLSPEC_CUDA_ATTENTION; else export CELLSPEC_CUDA_ATTENTION=$run; fi
  timeout 110 python3 bench/gpu-2026-12-06d/modes.py $ART $run >> $OUT/modes.jsonl 2>> $OUT/stderr.log; echo "$run rc=$? $(( $(date +%s) - s )) s"
done
unset CELLSPEC_CUDA_ATTENTION
python3 - $OUT/modes.jsonl <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["kind"] == "ttft":
        print(r["label"], r["mode"], "ttft", r["tokens"], "ms %.2f best %.2f probe %.1f" % (r["ms"], r["best_ms"], r["probe_ms"]))
    else:
        print(r["label"], r["mode"], "spec" if r["speculation"] else "plain", "b%d" % r["batch"], "tok/s %.0f" % r["tokens_per_s"], "tau", r["tau"] and round(r["tau"], 3), "hash", r["answers_hash"], "probe %.1f" % r["probe_ms"])
PY
grep -v "No registered plugin EP" $OUT/stderr.log | tail -5
