#!/usr/bin/env bash
# Produce the evidence kept in tests/fixtures/gpu-h200-0.5.10/ on a lent H200 (run from the repo root, with the
# wheels of sglang 0.5.10.post1 and its missing dependencies in .whl/). Test tooling, not product code.
# Every step has a deadline so the evidence tarball is written even when a step overruns.
set -u
: "${OUT:?set OUT to the folder that comes back}"
EV=/tmp/ev
DEADLINE_S=${DEADLINE_S:-570}
mkdir -p "$EV"
left() { echo $(( DEADLINE_S - SECONDS )); }
step() {  # step NAME STDOUT_FILE CMD... : run with what is left of the deadline; stderr to $EV/NAME.err
    local name=$1 out=$2; shift 2
    echo "[h200] $name: start at ${SECONDS}s ($(left)s left)" >&2
    timeout --signal=INT --kill-after=20 "$(left)" "$@" >"$out" 2>"$EV/$name.err"
    local rc=$?
    echo "$name rc=$rc end_s=$SECONDS" | tee -a "$EV/steps.txt" >&2
    return $rc
}
collect() {
    cp -r /tmp/bench "$EV/bench" 2>/dev/null; cp -r /tmp/prof "$EV/prof" 2>/dev/null
    tar czf "$OUT/evidence.tgz" -C /tmp ev
    for f in bench.json profile.json hotspots.json classify.json; do [ -s "$EV/$f" ] && cp "$EV/$f" "$OUT/"; done
    cp /tmp/bench/*.png "$OUT/" 2>/dev/null
    find /tmp/prof -name '*.trace.json.gz' -size -15M -exec cp {} "$OUT/" \; 2>/dev/null
    ls -la "$OUT" >&2
}

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$EV/pip.log" 2>&1 || { echo "pip install failed" >&2; tail -20 "$EV/pip.log" >&2; collect; exit 1; }
export PYTHONPATH=/tmp/site:$PWD/tests/gpu_harness:$PWD/scripts PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 \
    PYTHONUNBUFFERED=1 DIFFUSION_BENCH_WORKDIR=/tmp/work
{
    date -u +%FT%TZ; uname -a; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv
    python3 --version; command -v python3 nvcc sglang; ls /usr/local/cuda*/lib64/libcudart.so* 2>&1
    python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
    python3 -m pip list 2>/dev/null | grep -i -E '^(sglang|diffusers|transformers|tokenizers|apache-tvm-ffi|torch|triton|nvidia-ml-py|jsonschema|msgspec|huggingface.hub) '
    echo "sglang_cli: $(python3 -c 'from sgl_diffusion_bench import engine_process; print(engine_process.sglang_cli())')"
} >"$EV/machine.txt" 2>&1

step inspect "$EV/inspect.json" python3 scripts/diffusion_skill_env.py inspect --json
step probe "$EV/probe.json" python3 scripts/bench_diffusion_denoise.py --probe-engine --json
step profile "$EV/profile.json" python3 scripts/profile_diffusion.py --model tiny-flux-gpu --label h200prof \
    --all-stages --timeout-s 240 --json --output-dir /tmp/prof
TRACE=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])).get("traces") or []; print(t[0]["path"] if t else "")' \
    "$EV/profile.json" 2>/dev/null)
if [ -z "$TRACE" ]; then echo "[h200] no trace: stopping before the benchmark" >&2; collect; exit 1; fi
step hotspots "$EV/hotspots.json" python3 scripts/analyze_trace.py hotspots "$TRACE" --json
step classify "$EV/classify.json" python3 scripts/analyze_trace.py classify "$TRACE" --json
step bench "$EV/bench.json" python3 scripts/bench_diffusion_denoise.py --model tiny-flux-gpu --campaign aa --rounds 1 \
    --label h200 --output-dir /tmp/bench --report --cell-timeout-s "${CELL_TIMEOUT_S:-150}" --json
nvidia-smi >"$EV/nvidia-smi-after.txt" 2>&1
collect
