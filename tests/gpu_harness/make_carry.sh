#!/usr/bin/env bash
# Build what the H200 harness carries (test tooling, not product code): the wheels the machine lacks, checked against
# wheels-0.5.23.sha256, and sglang 0.5.23 as a slim tar (its cp312 wheel without the Rust .so files and test trees,
# 10 MB instead of 56). Run here, in the repository root: `bash tests/gpu_harness/make_carry.sh` -> .whl/
# Then name `.whl` in the device call's carry. The sglang wheel is tagged manylinux_2_34, which pip matches only when
# named exactly, hence the platform list below.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIST=tests/gpu_harness/wheels-0.5.23.sha256
DEST=$PWD/.whl
PY=${PYTHON:-python3}
PLATFORMS=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64)
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p "$DEST"
t0=$SECONDS
# the listed wheels, by name and version as their file names spell them
reqs=$(awk '{print $2}' "$LIST" | sed -E 's/^([^-]+)-([^-]+)-.*/\1==\2/')
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
    -d "$DEST" $reqs
(cd "$DEST" && sha256sum -c --quiet "$OLDPWD/$LIST") || { echo "make_carry: a wheel does not match $LIST" >&2; exit 1; }
echo "make_carry: $(wc -l <"$LIST") wheels checked in $((SECONDS - t0)) s" >&2
if [ ! -f "$DEST/sglang-0.5.23-slim.tar.xz" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
        -d "$tmp" sglang==0.5.23
    (cd "$tmp" && "$PY" -m zipfile -e sglang-0.5.23-*.whl unpacked && cd unpacked \
        && tar --exclude='*.so' --exclude=sglang/test --exclude=sglang/multimodal_gen/test \
            --exclude=sglang/multimodal_gen/apps/ComfyUI_SGLDiffusion/test --exclude=sglang/benchmark \
            --exclude=__pycache__ -cf - sglang sglang-0.5.23.dist-info | xz -6 >"$DEST/sglang-0.5.23-slim.tar.xz.part")
    mv "$DEST/sglang-0.5.23-slim.tar.xz.part" "$DEST/sglang-0.5.23-slim.tar.xz"
fi
du -sh "$DEST" >&2
