#!/usr/bin/env bash
# Build the CUPTI shim against the CUDA found on this node (or given), CUDA 12 or 13.
#
#   deploy/build-shim.sh [--cuda DIR] [--out DIR]
#
# DIR is a toolkit root or a header tree: whichever of DIR/include/cupti.h and
# DIR/cupti.h exists. Without --cuda: $CUDA_HOME, the toolkit of the nvcc on PATH,
# /usr/local/cuda, then the newest /usr/local/cuda-*. The shim links nothing of
# CUDA (it finds libcuda and libcupti in the profiled process), so the headers only
# decide which record layouts and callback ids it knows: build with the CUDA major
# your workloads use. Output: OUT/libgpu_agent_shim.so (default build/cudaMAJOR/),
# and one line naming the CUDA version it was built against.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda="" out=""
while [ $# -gt 0 ]; do
    case $1 in
        --cuda) cuda=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "build-shim: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
candidates=()
if [ -n "$cuda" ]; then
    candidates=("$cuda")
else
    [ -n "${CUDA_HOME:-}" ] && candidates+=("$CUDA_HOME")
    command -v nvcc >/dev/null && candidates+=("$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")")
    candidates+=(/usr/local/cuda $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV))
fi
inc=""
for c in "${candidates[@]}"; do
    for d in "$c/include" "$c"; do
        if [ -f "$d/cupti.h" ] && [ -f "$d/cuda.h" ]; then inc=$d; break 2; fi
    done
done
if [ -z "$inc" ]; then
    echo "build-shim: no CUDA headers with CUPTI found (looked in: ${candidates[*]:-nothing}); pass --cuda DIR or set CUDA_HOME" >&2
    exit 1
fi
ver=$(awk '/^#define CUDA_VERSION /{print $3; exit}' "$inc/cuda.h")
major=$((ver / 1000)) minor=$((ver % 1000 / 10))
if [ "$major" -lt 12 ]; then
    echo "build-shim: $inc has CUDA $major.$minor; the shim supports CUDA 12 and 13" >&2
    exit 1
fi
out=${out:-build/cuda$major}
mkdir -p "$out"
make --no-print-directory -s SHIM="$out/libgpu_agent_shim.so" CUDA_INC="$inc" "$out/libgpu_agent_shim.so"
echo "build-shim: $out/libgpu_agent_shim.so built against CUDA $major.$minor headers in $inc"
