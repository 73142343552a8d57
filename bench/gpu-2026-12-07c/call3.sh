# call 3 (same machine, no carry): the host's side of a round on this host (tools/bench_host.py, no
# GPU work), each before a trees_ab.py run, then the same with --profile.
source /tmp/gpusite/env.sh || exit 3; export TQDM_DISABLE=1 PYTHONUNBUFFERED=1; mkdir -p $OUT; ART=/tmp/cellspec-gpu/smollm2-float16-smollm2-135m-instruct
for i in 1 2; do s=$(date +%s); timeout 60 python3 tools/bench_host.py $ART --n-draft 15 --tree-nodes 15 > $OUT/host-$i.log 2>&1; echo "host $i rc=$? $(( $(date +%s) - s )) s"; grep -E "^(DFlash|plain)" $OUT/host-$i.log | cut -c1-260
s=$(date +%s); timeout 100 python3 bench/gpu-2026-12-06j/trees_ab.py $ART 12 8 plain,t15 > $OUT/ab$((8+i)).log 2>/dev/null; echo "ab$((8+i)) rc=$? $(( $(date +%s) - s )) s"; grep summary $OUT/ab$((8+i)).log | cut -c1-400; done
timeout 60 python3 tools/bench_host.py $ART --n-draft 15 --tree-nodes 15 --profile > $OUT/host-profile.log 2>&1; echo "profile rc=$?"; head -3 $OUT/host-profile.log | cut -c1-260
