#!/usr/bin/env bash
# Install what building, running and testing gpu-agent needs on Debian/Ubuntu (as root):
# bcc + kernel headers (the agent), Go pprof (the tests read profiles with it), a C
# toolchain, node/npm and chromium (the web UI's bundle and its tests), CUDA 13 headers if
# no toolkit is present (the shim and the mock CUDA stack build against them), and CUDA 12 headers (the shim's CUDA 12 build is tested). Idempotent; `make deps` runs it, `make test`/`make run`
# run it when something is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: needs root to apt-get install (run: sudo make deps)" >&2
    exit 1
fi

apt-get update -qq
# Kernel headers for bcc: the distribution's newest linux-headers-*-amd64. The running
# kernel is often newer than the distribution's; bcc needs a header tree, not an exact match.
hdr=$(apt-cache depends linux-headers-amd64 2>/dev/null | awk '/Depends: linux-headers-/{print $2; exit}')
exact=linux-headers-$(uname -r)
if apt-cache show "$exact" >/dev/null 2>&1; then hdr=$exact; fi
apt-get install -y -qq --no-install-recommends \
    build-essential binutils bpfcc-tools python3-bpfcc libbpfcc ${hdr:+$hdr} \
    golang-go golang-github-google-pprof-dev python3-venv procps prometheus valgrind >/dev/null
# The web UI: npm builds its bundle (`make ui`, the pinned agent/gpu_agent/outputs/ui/bundle/package-lock.json), and the
# UI tests drive Debian's chromium with Playwright (never Playwright's own download).
command -v npm >/dev/null || apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null

kver=$(uname -r)
if [ ! -e "/lib/modules/$kver/build" ]; then
    mkdir -p "/lib/modules/$kver"
    ln -sfn "$(ls -d /usr/src/linux-headers-*-amd64 | sort -V | tail -1)" "/lib/modules/$kver/build"
    ln -sfn "$(ls -d /usr/src/linux-headers-*-common | sort -V | tail -1)" "/lib/modules/$kver/source"
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true

# CUDA headers from NVIDIA's pip wheels (headers only: nothing of CUDA is linked).
# Same wheels as the Dockerfile's shim stage.
cuda_headers() {  # DEST WHEEL...
    local dest=$1 venv=/tmp/gpu-agent-cuda-venv-$$; shift
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$@"
    mkdir -p "$dest"
    find "$venv" -path '*nvidia*' -name include -type d -exec sh -c 'cp -rn "$1"/. "$2"/' _ {} "$dest" \;
    rm -rf "$venv"
    test -f "$dest/cupti.h"
}
# CUDA 13 (the default build): a real toolkit if present, else the wheels into /opt/gpu-agent-cuda.
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cupti.h" ] && [ ! -f /opt/gpu-agent-cuda/include/cupti.h ]; then
    cuda_headers /opt/gpu-agent-cuda/include "nvidia-cuda-runtime==13.*" "nvidia-cuda-cupti==13.*" \
        "nvidia-cuda-crt==13.*" "nvidia-cuda-nvcc==13.*"
    echo "install-deps: CUDA 13 headers from pip in /opt/gpu-agent-cuda (make picks them up)"
fi
# CUDA 12: tests/test_build_shim.py builds the shim against them (deploy/build-shim.sh).
if [ ! -f /opt/gpu-agent-cuda12/include/cupti.h ]; then
    cuda_headers /opt/gpu-agent-cuda12/include nvidia-cuda-runtime-cu12==12.9.79 \
        nvidia-cuda-cupti-cu12==12.9.79 nvidia-cuda-nvcc-cu12==12.9.86
    echo "install-deps: CUDA 12 headers from pip in /opt/gpu-agent-cuda12"
fi
echo "install-deps: done"
