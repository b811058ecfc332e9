#!/usr/bin/env bash
# The `serving` part of run_h200_0523.sh (test tooling, not product code): eager vs BCG served by two real
# `sglang serve` processes on the one H200 (both resident at once, ~26 GiB each), the same seeded trace at two request
# rates and one concurrency, A1 B1 B2 A2 x 1 round. Kept as the fixture tests/fixtures/gpu-h200-0.5.23/serving/,
# checked by tests/test_gpu_h200_serving.py.
#   serving_part.sh run            the tool's one JSON document on stdout, its progress on stderr (the pipeline's step)
#   serving_part.sh collect DEST   the fixture's files into DEST (what exists; a run that stopped early leaves less)
# Rates: a 1024x1024 28-step request takes ~4.2 s eager on the H200 (warm-vs-cold fixture), so one server saturates
# near 0.24 req/s: 0.2 req/s is just below saturation (~84 % busy), 0.4 req/s above it (requests queue). 3 requests per
# block: 12 blocks of ~13 s, ~2.5 min of load after the two servers' load and warm-up (~2 min), ~5 min in all.
# Every setting can be overridden (a CPU dry run: PY=.venv/bin/python SERVING_MODEL=tiny-flux-cpu SERVING_MODEL_PATH=
# SERVING_STEPS=2 SERVING_ARM_A= SERVING_ARM_B='--batching-max-size 2' SERVING_RATES=2,4 SERVING_DIR=/tmp/sv ...).
set -u
PY=${PY:-python3}
DIR=${SERVING_DIR:-/tmp/serving}
SERVING_MODEL=${SERVING_MODEL:-flux-1gpu}
SERVING_MODEL_PATH=${SERVING_MODEL_PATH-${MODEL:-/tmp/m/FLUX.1-dev}}
SERVING_STEPS=${SERVING_STEPS-${STEPS:-28}}
SERVING_RATES=${SERVING_RATES:-0.2,0.4}
SERVING_CONC=${SERVING_CONC-1}
SERVING_REQUESTS=${SERVING_REQUESTS:-3}
SERVING_SLO_MS=${SERVING_SLO_MS:-10000}
# the engine arguments of the evidence part's arms (collect_pr_evidence.py --bcg with --attention-backend torch_sdpa,
# as its campaign cells ran them): the engine's request warm-up, BCG seeded at the served shape. Not --quality=lossless:
# `sglang serve` refuses it (a sampling flag of `generate`); a served request without "quality" gets the engine's
# default, which is lossless in 0.5.23.
COMMON="--warmup-mode request --attention-backend torch_sdpa"
SERVING_ARM_A=${SERVING_ARM_A-$COMMON}
SERVING_ARM_B=${SERVING_ARM_B-"$COMMON --enable-breakable-cuda-graph --warmup-resolutions 1024x1024"}
LOG_HEAD=${LOG_HEAD:-80}
LOG_TAIL=${LOG_TAIL:-200}
HERE=$(cd "$(dirname "$0")" && pwd)

run() {
    local extra=()
    [ -n "$SERVING_MODEL_PATH" ] && extra+=(--model-path "$SERVING_MODEL_PATH")
    [ -n "$SERVING_STEPS" ] && extra+=(--steps "$SERVING_STEPS")
    [ -n "$SERVING_CONC" ] && extra+=(--concurrency "$SERVING_CONC")
    rm -rf "$DIR"  # ours: only this part writes it
    exec "$PY" "$HERE/../../scripts/bench_diffusion_serving.py" --model "$SERVING_MODEL" "${extra[@]}" \
        "--arm-a-args=$SERVING_ARM_A" "--arm-b-args=$SERVING_ARM_B" --request-rate "$SERVING_RATES" \
        --requests "$SERVING_REQUESTS" --rounds 1 --warmup-requests 1 --slo-ms "$SERVING_SLO_MS" \
        --startup-timeout-s 480 --output-dir "$DIR" --json
}

log_excerpt() {  # log_excerpt LOG: its first and last lines, and every BCG/fallback/error line in between, numbered
    local log=$1 lines
    lines=$(wc -l <"$log")
    echo "# $log: $lines lines; the first $LOG_HEAD, the BCG/fallback/error lines, the last $LOG_TAIL"
    awk -v head="$LOG_HEAD" -v tail_from=$((lines - LOG_TAIL)) '
        NR <= head || NR > tail_from || /BCG|[Ff]allback|[Ee]rror|Traceback|captured/ { print NR ": " $0 }' "$log"
}

collect() {  # collect DEST [EV]: the report, its Markdown and plot, the step's stdout/stderr, the servers' log excerpts
    local dest=$1 ev=${2:-/tmp/ev}
    mkdir -p "$dest"
    [ -f "$DIR/report.json" ] && cp "$DIR/report.json" "$dest/serving-report.json"
    [ -f "$DIR/report.md" ] && cp "$DIR/report.md" "$dest/report.md"
    [ -f "$DIR/latency_vs_rate.png" ] && cp "$DIR/latency_vs_rate.png" "$dest/latency_vs_rate.png"
    for f in serving.json serving.err; do [ -f "$ev/$f" ] && cp "$ev/$f" "$dest/$f"; done
    for arm in a b; do
        [ -f "$DIR/server-$arm/server.log" ] && log_excerpt "$DIR/server-$arm/server.log" >"$dest/server-$arm.log-excerpt.txt"
    done
    ls -la "$dest" >&2
}

case "${1:-}" in
    run) run ;;
    collect) shift; collect "$@" ;;
    *) echo "usage: $0 run | collect DEST [EV]" >&2; exit 2 ;;
esac
