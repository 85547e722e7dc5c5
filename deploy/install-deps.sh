#!/usr/bin/env bash
# Install what building, running and testing gpu-agent needs on Debian/Ubuntu (as root):
# bcc + kernel headers (the agent), Go pprof (the tests read profiles with it), a C
# toolchain, and CUDA 13 headers if no toolkit is present (the shim and the mock CUDA
# stack build against them). Idempotent; `make deps` runs it, `make test`/`make run`
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
    golang-go golang-github-google-pprof-dev python3-venv procps prometheus >/dev/null

kver=$(uname -r)
if [ ! -e "/lib/modules/$kver/build" ]; then
    mkdir -p "/lib/modules/$kver"
    ln -sfn "$(ls -d /usr/src/linux-headers-*-amd64 | sort -V | tail -1)" "/lib/modules/$kver/build"
    ln -sfn "$(ls -d /usr/src/linux-headers-*-common | sort -V | tail -1)" "/lib/modules/$kver/source"
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
mountpoint -q /sys/kernel/debug || mount -t debugfs nodev /sys/kernel/debug 2>/dev/null || true

# CUDA headers: a real toolkit if present, else NVIDIA's pip wheels into /opt/gpu-agent-cuda.
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cupti.h" ] && [ ! -f /opt/gpu-agent-cuda/include/cupti.h ]; then
    python3 -m venv /tmp/gpu-agent-cuda-venv
    /tmp/gpu-agent-cuda-venv/bin/pip install -q "nvidia-cuda-runtime==13.*" "nvidia-cuda-cupti==13.*" "nvidia-cuda-crt==13.*" "nvidia-cuda-nvcc==13.*"
    mkdir -p /opt/gpu-agent-cuda/include
    find /tmp/gpu-agent-cuda-venv -path '*nvidia*' -name include -type d \
        -exec sh -c 'cp -rn "$1"/. /opt/gpu-agent-cuda/include/' _ {} \;
    echo "install-deps: CUDA headers from pip in /opt/gpu-agent-cuda (make picks them up)"
fi
echo "install-deps: done"
