#!/usr/bin/env bash
# Produce the evidence kept in tests/fixtures/gpu-h200-0.5.23/campaign on a lent H200 with sglang 0.5.23 (test
# tooling, not product code). Run from the repository root with carry [.whl] holding the wheels of the packages the
# machine lacks and sglang-0.5.23-slim.tar.xz, both made here by tests/gpu_harness/make_carry.sh (the list with hashes:
# wheels-0.5.23.sha256):
#   OUT=... bash tests/gpu_harness/run_h200_0523.sh start   # sets up, starts the pipeline in its own session, holds
#   OUT=... bash tests/gpu_harness/run_h200_0523.sh hold    # next call, while the machine is warm: holds, collects
# PARTS="evidence campaign profile reference replay warmcold serving video edit" (default: all but evidence, serving,
# video and edit) picks what the pipeline runs after the set-up; `serving` is tests/gpu_harness/serving_part.sh (eager
# vs BCG served, ~5 min); `video` and `edit` alone build no FLUX.1 model.
# The pipeline outlives a call (setsid) while the machine stays held; each call collects what exists into $OUT.
set -u
: "${OUT:?set OUT to the folder that comes back}"
# The pipeline runs from a private copy (/tmp/harness-src): the device call that collects re-sends the working tree and
# replaces it, which once removed a running step's working directory (FileNotFoundError from os.getcwd()).
SRC=/tmp/harness-src
R=$SRC
EV=/tmp/ev
HOLD_S=${HOLD_S:-560}
STEPS=${STEPS:-28}
MODEL=/tmp/m/FLUX.1-dev
mkdir -p "$EV"
export PYTHONPATH=$R/tests/gpu_harness:/tmp/site:$R/scripts PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
    DIFFUSION_BENCH_WORKDIR=/tmp/work TVM_FFI_CACHE_DIR=/tmp/tvm-ffi-cache

pipeline() {
    stamp() { echo "$1 $(date -u +%s) $(date -u +%T)" >>"$EV/steps.txt"; }
    step() {  # step NAME TIMEOUT_S CMD...: stdout to $EV/NAME.json, stderr to $EV/NAME.err, wall time recorded
        local name=$1 limit=$2; shift 2
        stamp "$name.start"
        timeout --signal=INT --kill-after=30 "$limit" "$@" >"$EV/$name.json" 2>"$EV/$name.err"
        echo "$name rc=$?" >>"$EV/steps.txt"
        stamp "$name.end"
    }
    stamp pipeline.start
    if [ ! -f /tmp/site/.ok ]; then
        mkdir -p /tmp/site/bin
        tar -xJf .whl/sglang-0.5.23-slim.tar.xz -C /tmp/site && python3 -m pip install -q --no-index --no-deps \
            --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$EV/pip.log" 2>&1 \
            && touch /tmp/site/.ok || { echo "setup failed" >>"$EV/steps.txt"; return 1; }
    fi
    # the console script needs the __main__ guard: multiprocessing's spawn re-runs the main module in each worker
    printf '#!/usr/bin/env python3\nimport sys\nfrom sglang.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
        >/tmp/site/bin/sglang && chmod +x /tmp/site/bin/sglang
    ( python3 -m compileall -q -j 16 /tmp/site/sglang >/dev/null 2>&1 & )
    stamp setup.end
    {
        date -u +%FT%TZ; uname -r; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total,clocks.max.sm --format=csv
        python3 --version; command -v python3 nvcc sglang
        python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
        python3 -m pip list 2>/dev/null | grep -i -E '^(sglang|diffusers|transformers|tokenizers|apache-tvm-ffi|torch|triton|nvidia-ml-py|flash.attn.*|sgl.kernel) '
    } >"$EV/machine.txt" 2>&1
    flux_parts=$(echo " ${PARTS:-campaign profile reference replay warmcold} " | sed 's/ video / /g; s/ edit / /g' | tr -d ' ')
    [ -n "$flux_parts" ] && step tiny 300 python3 -c 'import json; from sgl_diffusion_bench.engine.tiny_model import ensure_local_model; print(json.dumps(str(ensure_local_model())))'
    tiny=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])))' "$EV/tiny.json" 2>/dev/null)
    [ -z "$flux_parts" ] || [ -f "$MODEL/model_index.json" ] || step build 300 python3 tests/gpu_harness/build_flux_dev_shaped.py "$MODEL" "$tiny"
    step inspect 200 python3 scripts/diffusion_skill_env.py inspect --json
    step probe 200 python3 scripts/bench_diffusion_denoise.py --probe-engine --json
    has() { case " ${PARTS:-campaign profile reference replay warmcold} " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
    # 0. the whole seed experiment as one command: eager vs BCG, A/B/B/A until a verdict (budget 8 requests), identity,
    # profile pair, trace compare, BCG replay, cleanup ledger, and its own verify (the folder is kept as a fixture)
    has evidence && step evidence 1500 python3 scripts/collect_pr_evidence.py run --out /tmp/evidence --model flux-1gpu \
        --model-path "$MODEL" --override num_inference_steps="$STEPS" --bcg --budget-requests 8 \
        --model-cache-root /tmp/mc-ev --json "--extra-args=--attention-backend torch_sdpa"
    has evidence && step evidence-verify 300 python3 scripts/collect_pr_evidence.py verify /tmp/evidence --json
    # 1. ours: eager vs BCG, A/B/B/A x 2, warm engines, isolated model cache with its cleanup ledger
    has campaign && step campaign 1500 python3 scripts/bench_diffusion_denoise.py --model flux-1gpu --model-path "$MODEL" \
        --override num_inference_steps="$STEPS" --campaign abba --rounds 2 --engine warm --label h200warm \
        --output-dir /tmp/bench --model-cache-root /tmp/mc --cleanup-model-cache --cell-timeout-s 600 --report \
        --json "--extra-args=--attention-backend torch_sdpa"
    # 2. the seed PR's profile table: one profiled 2-step request eager and BCG, compared
    for arm in $(has profile && echo eager bcg); do
        flag=; [ $arm = bcg ] && flag=--breakable-cuda-graph
        step "profile-$arm" 400 python3 scripts/profile_diffusion.py --model flux-1gpu --model-path "$MODEL" \
            --override num_inference_steps=2 --all-stages $flag --label "prof-$arm" --output-dir /tmp/prof \
            --timeout-s 380 --json "--extra-args=--attention-backend torch_sdpa"
    done
    te=$(ls /tmp/prof/*prof-eager*/traces/*.trace.json.gz 2>/dev/null | head -1)
    tb=$(ls /tmp/prof/*prof-bcg*/traces/*.trace.json.gz 2>/dev/null | head -1)
    if [ -n "$te" ] && [ -n "$tb" ]; then
        step compare 200 python3 scripts/analyze_trace.py compare "$te" "$tb" --label-a eager --label-b bcg --json
    fi
    # 4. BCG replay correctness: warm eager and BCG engines serve one scripted sequence (8 steps: correctness only)
    has replay && step replay 900 python3 scripts/bench_diffusion_denoise.py --bcg-replay --model flux-1gpu --model-path "$MODEL" \
        --override num_inference_steps=8 --label h200replay --output-dir /tmp/replay --cell-timeout-s 600 --json \
        "--extra-args=--attention-backend torch_sdpa"
    # 5. warm against cold: the same eager A/A request on one resident engine, then on one engine process per cell
    for mode in $(has warmcold && echo warm cold); do
        step "aa-$mode" 900 python3 scripts/bench_diffusion_denoise.py --model flux-1gpu --model-path "$MODEL" \
            --override num_inference_steps="$STEPS" --campaign aa --rounds "${AA_ROUNDS:-1}" --engine "$mode" \
            --label "h200aa-$mode" --output-dir /tmp/aa --cell-timeout-s 600 --report --json \
            "--extra-args=--attention-backend torch_sdpa"
    done
    # 6. serving: eager vs BCG as two resident `sglang serve` processes, two request rates and concurrency 1
    has serving && step serving 600 bash tests/gpu_harness/serving_part.sh run
    # 7. the tiny random Wan2.1 video models, built here by the tools as on CPU: the text-to-video evidence path (a
    # warm A/B/B/A campaign judged on the decoded videos, a profile of each arm, the trace analysis, verify) and an
    # image-to-video A/A campaign whose input image travels to the engine. The videos are written and read by the
    # harness's ffmpeg and av stand-ins over the machine's OpenCV (neither package fits the carry)
    if has video; then
        step video-evidence 900 python3 scripts/collect_pr_evidence.py run --out /tmp/video-evidence \
            --model tiny-wan-t2v-gpu --candidate-args "--log-level info" --budget-requests 8 --json \
            "--extra-args=--attention-backend torch_sdpa"
        step video-evidence-verify 300 python3 scripts/collect_pr_evidence.py verify /tmp/video-evidence --json
        step i2v 600 python3 scripts/bench_diffusion_denoise.py --model tiny-wan-i2v-gpu --campaign aa --rounds 1 \
            --engine warm --label h200i2v --output-dir /tmp/i2v --cell-timeout-s 500 --report --json \
            "--extra-args=--attention-backend torch_sdpa"
    fi
    # 8. the tiny random FLUX.2 Klein, built here by the tools as on CPU: the image-edit evidence path (the bundled
    # input image through the VAE encoder in every cell, a profile of each arm, the trace analysis, verify)
    if has edit; then
        step edit-evidence 900 python3 scripts/collect_pr_evidence.py run --out /tmp/edit-evidence \
            --model tiny-flux2-edit-gpu --candidate-args "--log-level info" --budget-requests 8 --json \
            "--extra-args=--attention-backend torch_sdpa"
        step edit-evidence-verify 300 python3 scripts/collect_pr_evidence.py verify /tmp/edit-evidence --json
    fi
    # 9. the reference skill's own script, same model and request, A/B/B/A x 1 (one cold process per row); last, as the
    # longest part (REF_ROWS runs fewer rows)
    stamp reference.start
    for row in $(has reference && echo ${REF_ROWS:-a1:eager b1:bcg b2:bcg a2:eager}); do  # REF_ROWS: fewer rows
        flag=; [ "${row#*:}" = bcg ] && flag=--breakable-cuda-graph
        step "reference-${row%%:*}" 500 python3 tests/gpu_harness/run_reference_bench.py "$MODEL" "$STEPS" -- \
            --label "ref-${row%%:*}-${row#*:}" --output-dir /tmp/ref $flag
    done
    stamp reference.end
    stamp pipeline.end
}

collect() {
    nvidia-smi >"$EV/nvidia-smi-now.txt" 2>&1
    ( cd /tmp && tar czf "$OUT/ev.tgz" --exclude='*.safetensors' --exclude='*.png' ev \
        $(ls -d bench prof ref replay mc aa serving 2>/dev/null) 2>/dev/null )
    # the video and edit parts' folders whole (tiny outputs and traces)
    ( cd /tmp && tar czf "$OUT/video.tgz" $(ls -d video-evidence i2v edit-evidence 2>/dev/null) 2>/dev/null )
    # the serving part's fixture files (serving-report.json, report.md, the plot, the servers' log excerpts)
    [ -d /tmp/serving ] && bash tests/gpu_harness/serving_part.sh collect "$OUT/serving" "$EV" 2>/dev/null
    # the evidence folder in 15 MB pieces (a file that comes back is at most 16 MiB; the profile's trace alone was 31.6
    # MB): everything but the outputs, plus the plot; then one output image (`cat evidence.tgz.* | tar xz`)
    [ -d /tmp/evidence ] && ( cd /tmp && find evidence -type f \( ! -name '*.png' -o -name evidence-plot.png \) \
        | tar czf - -T - | split -b 15M - "$OUT/evidence.tgz." \
        && find evidence/campaign -name '*.png' | sort | head -1 | tar czf "$OUT/evidence-output.tgz" -T - ) 2>/dev/null
    ( cd /tmp && find bench -name '*.png' 2>/dev/null | sort | head -2 | tar czf "$OUT/png.tgz" -T - 2>/dev/null )
    cp "$EV/steps.txt" "$OUT/steps.txt" 2>/dev/null
    ls -la "$OUT" >&2
}

hold() {
    while [ "$SECONDS" -lt "$HOLD_S" ] && kill -0 "$(cat /tmp/pipeline.pid 2>/dev/null)" 2>/dev/null; do
        sleep 5
    done
    echo "[h200] hold ends at ${SECONDS}s; pipeline $(kill -0 "$(cat /tmp/pipeline.pid 2>/dev/null)" 2>/dev/null \
        && echo still running || echo finished)" >&2
    tail -n 40 "$EV/steps.txt" >&2
    grep -h "^\[cell\|^\[engine\|verdict\|^\[evidence" "$EV"/campaign.err "$EV"/aa-*.err "$EV"/evidence.err \
        "$EV"/video-evidence.err "$EV"/i2v.err "$EV"/edit-evidence.err 2>/dev/null \
        | tail -30 >&2
    tail -n 12 "$EV/serving.err" 2>/dev/null >&2
    collect
}

case "${1:-}" in
    start)
        if ! kill -0 "$(cat /tmp/pipeline.pid 2>/dev/null)" 2>/dev/null; then
            rm -rf "$SRC.new" && mkdir -p "$SRC.new" \
                && tar --exclude=./.git --exclude=./tests/fixtures -cf - . | tar -xf - -C "$SRC.new" \
                && rm -rf "$SRC" && mv "$SRC.new" "$SRC" && cd "$SRC" || { echo "private copy failed" >&2; exit 1; }
            export -f pipeline
            export EV STEPS MODEL PARTS AA_ROUNDS
            setsid nohup bash -c pipeline >"$EV/pipeline.log" 2>&1 </dev/null &
            echo $! >/tmp/pipeline.pid
        fi
        hold ;;
    hold) hold ;;
    *) echo "usage: $0 start|hold" >&2; exit 2 ;;
esac
