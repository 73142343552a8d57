# twenty-first sitting, call 1 (with the last staging part): the plugin built, then shape C (36
# Qwen3-8B layers, vocab 151,936, random float16, its random 5-layer draft of block 16) exported
# into /tmp/cw as `gpu_bench.py dflash` exports it
source /tmp/gpusite/env.sh || exit 3; export CELLSPEC_ORT_INCLUDE=$PWD/.gpu/ort-include TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT
s=$(date +%s); python3 -m cellspec.plugins.build > $OUT/build.log 2>&1 || { tail $OUT/build.log; exit 4; }; echo "build $(( $(date +%s) - s )) s"
s=$(date +%s)
timeout 420 python3 -c "
import argparse, sys; from pathlib import Path; sys.path.insert(0, 'tools'); sys.path.insert(0, '.')
from tools.gpu_bench import shape_artifact, cycle_floor_over_step
folder = shape_artifact('C', argparse.Namespace(work=Path('/tmp/cw'), dtype='float16', context=1024), 32)
print('floor cycle/step', cycle_floor_over_step(folder))" 2>&1 | grep -v "plugin EP" | tail -5
echo "rc=$? export $(( $(date +%s) - s )) s"; du -sh /tmp/cw/*
