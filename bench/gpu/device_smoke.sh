#!/usr/bin/env bash
# Real-GPU check, run on the GPU node from the repo root as root:
#   bench/gpu/device_smoke.sh BCC_BUNDLE_DIR WHEEL_DIR OUT_DIR [overhead]
# BCC_BUNDLE_DIR comes from deploy/offline/bcc-offline-bundle.sh (the node has no
# package registry); WHEEL_DIR holds protobuf, pyelftools and cxxfilt wheels.
set -uo pipefail
bundle=$1 wheels=$2 out=$3 mode=${4:-smoke}
mkdir -p "$out"
source deploy/offline/bcc-offline-env.sh "$bundle"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl
export PYTHONPATH=/tmp/site:$PWD/agent${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi -L; uname -r
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
make -s shim CUDA_HOME=/usr/local/cuda || exit 1
objdump -d build/libgpu_agent_shim.so | grep -c 'nopl   0x0(%rax,%rax,1)' | sed 's/^/5-byte nops in shim: /'
python3 -m gpu_agent record -o "$out/smoke.pb.gz" -- python3 bench/gpu/smoke.py 2000
if [ -x build/tools/pprof ]; then echo "== pprof -top"; build/tools/pprof -top -nodecount=30 "$out/smoke.pb.gz" 2>&1 | cut -c1-220; fi

if [ "$mode" = overhead ]; then
    python3 bench/gpu/run_overhead.py --rounds ${ROUNDS:-3} --steps 2000 --profiles /tmp/prof 2>&1 | tee "$out/overhead.txt"
fi
