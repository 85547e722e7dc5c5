#!/usr/bin/env bash
# The GPU benchmark on a node without a package registry (the `device` tool's
# machines), as root from the repository root:
#   bench/gpu/device.sh BCC_BUNDLE_DIR WHEEL_DIR -- ARGS...   ->  python3 -m bench.gpu ARGS...
# BCC_BUNDLE_DIR: deploy/offline/bcc-offline-bundle.sh's output. WHEEL_DIR: the
# agent's pure-Python wheels (pip download --python-version 3.12 protobuf
# pyelftools cxxfilt opentelemetry-proto PyYAML). Several `--` groups run in turn.
set -uo pipefail
bundle=$1 wheels=$2
shift 2
source deploy/offline/bcc-offline-env.sh "$bundle" >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD:$PWD/agent${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi -L; date -u
make -s shim shim-bench CUDA_HOME=/usr/local/cuda || exit 1
rc=0
while [ $# -gt 0 ]; do
    [ "$1" = "--" ] && shift
    args=()
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
    [ ${#args[@]} -gt 0 ] || continue
    echo "== python3 -m bench.gpu ${args[*]}"
    python3 -m bench.gpu "${args[@]}" || rc=1
done
exit $rc
