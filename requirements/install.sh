#!/usr/bin/env bash
# Create (or complete) a virtualenv with the CPU engine of one sglang release and this bundle:
#   requirements/install.sh VENV ENGINE      e.g. requirements/install.sh .venv 0.5.23
# CPU torch 2.13.0 (never a CUDA build: requirements/constraints-cpu.txt), sglang and diffusers without their
# dependencies (they declare CUDA-only packages and a CUDA torch), the packages the diffusion path imports, the
# bundle's tools, and the bundle itself (editable). Uses uv (installed on the fly when missing; ~6x faster than pip);
# falls back to pip when uv cannot be had. Output goes to stderr.
set -euo pipefail
venv=${1:?usage: install.sh VENV ENGINE}
engine=${2:?usage: install.sh VENV ENGINE}
here=$(cd "$(dirname "$0")" && pwd)
nodeps=$here/engine-$engine-nodeps.txt
imports=$here/engine-$engine-cpu.txt
if [[ ! -f $nodeps || ! -f $imports ]]; then
  echo "install.sh: no install set for sglang $engine in requirements/ (have: $(ls "$here" | sed -n 's/^engine-\(.*\)-nodeps.txt$/\1/p' | tr '\n' ' '))" >&2
  exit 2
fi
python=${PYTHON:-python3}
# phase NAME CMD...: runs one set-up phase, then says on stderr how long it took (issue 26, build 1)
phase() {
  local name=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  echo "install.sh: $name ..." >&2
  "$@"
  t1=$(date +%s.%N)
  awk -v n="$name" -v a="$t0" -v b="$t1" 'BEGIN { printf "install.sh: %s done in %.1f s\n", n, b - a }' >&2
}
# Where a CPU torch wheel lies: this machine keeps torch 2.13.0+cpu in /opt/wheels (PyPI's torch is a CUDA build);
# elsewhere the PyTorch CPU index. Override with TORCH_FIND_LINKS=<dir> or TORCH_INDEX=<url>.
torch_source=()
if [[ -n ${TORCH_FIND_LINKS:-} || -d /opt/wheels ]]; then
  torch_source=(--find-links "${TORCH_FIND_LINKS:-/opt/wheels}")
else
  torch_source=(--extra-index-url "${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}")
fi
uv=$(command -v uv || true)
if [[ -z $uv ]]; then
  # in this user's cache for the bundle (like the download caches), so a second clone finds it (pip took 4 s here)
  boot=${XDG_CACHE_HOME:-$HOME/.cache}/sglang-diffusion-benchmark-profile/uv-bootstrap
  # pip's own notes about this machine's pip config (e.g. "Location 'file:///...' is ignored" for an extra index
  # that has no uv) say nothing about the install: shown only when the bootstrap fails
  # bootstrap_uv: installs uv into $boot with pip (one set-up phase, timed like the others)
  bootstrap_uv() {
    if ! boot_log=$(PIP_ROOT_USER_ACTION=ignore "$python" -m pip install -q --disable-pip-version-check --target "$boot" uv 2>&1); then
      printf '%s\n' "$boot_log" >&2
      echo "install.sh: could not install uv; using pip (slower)" >&2
    fi
  }
  [[ -x $boot/bin/uv ]] || phase "uv bootstrap (pip install uv)" bootstrap_uv
  [[ -x $boot/bin/uv ]] && uv=$boot/bin/uv
fi
if [[ -n $uv ]]; then
  # --seed: the venv gets pip like one made by python -m venv (users and .ci/wheel-selftest expect it)
  [[ -x $venv/bin/python ]] || phase "venv creation" "$uv" venv -q --seed --python "$python" "$venv" >&2
  install=("$uv" pip install -q --python "$venv/bin/python")
else
  [[ -x $venv/bin/python ]] || phase "venv creation" "$python" -m venv "$venv" >&2
  install=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
fi
phase "engine install (no-deps set)" "${install[@]}" --no-deps -r "$nodeps" >&2
phase "torch + engine imports + tools install" "${install[@]}" "${torch_source[@]}" -c "$here/constraints-cpu.txt" torch==2.13.0 -r "$imports" -r "$here/tools.txt" >&2
phase "bundle install (editable)" "${install[@]}" --no-deps -e "$here/.." >&2
# The bytecode of the modules an engine run imports (measured by requirements/measure_bytecode.py), compiled on every
# core: otherwise the first run compiles about 7,000 modules one by one inside its import of sglang (about 25 s here)
bytecode=$here/engine-$engine-bytecode.txt
if [[ -f $bytecode ]]; then
  phase "bytecode of an engine run (measured list, all cores)" "$venv/bin/python" "$here/precompile.py" "$bytecode" --also "$here/../scripts"
fi
