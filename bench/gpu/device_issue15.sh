#!/usr/bin/env bash
# Issue 15 on the GPU node (root, repo root; the node has no package registry):
#   bench/gpu/device_issue15.sh BCC_BUNDLE_DIR WHEEL_DIR OUT_DIR MODES [WORKLOADS]
# MODES, comma-separated:
#   cupti     the standalone CUPTI check (bench/gpu/cupti_graph_windows.cu): raw
#             records of graph replays under repeated activity windows -> OUT/cgw.csv.gz
#   fidelity  GPU time and launches of the default windows against continuous runs
#             (bench/gpu/gpu_time_fidelity.py --run), WORKLOADS (default: all)
#   shares    per-stack shares under windows (fidelity.py, truth 75/25)
#   interval  per-interval spread of `gpu-agent run` (interval_accuracy.py)
set -uo pipefail
bundle=$1 wheels=$2 out=$3 mode=$4 workloads=${5:-graph,driver-graph,mlp,eager,compiled,mlp-x4}
mkdir -p "$out"
nvidia-smi -L; date -u
if [[ ",$mode," == *,cupti,* ]]; then
    mkdir -p build/bench
    nvcc -O2 -o build/bench/cupti_graph_windows bench/gpu/cupti_graph_windows.cu -lcupti -lcuda \
        -L/usr/local/cuda/lib64 -I/usr/local/cuda/include 2>&1 | grep -v Remark
    timeout 240 build/bench/cupti_graph_windows "$out/cgw.csv" | tee "$out/cgw.txt"
    gzip -f "$out/cgw.csv"
fi
source deploy/offline/bcc-offline-env.sh "$bundle" >/dev/null
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD/agent:$PWD/bench/gpu${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
make -s shim CUDA_HOME=/usr/local/cuda || exit 1
if [[ ",$mode," == *,fidelity,* ]]; then
    python3 bench/gpu/gpu_time_fidelity.py --workloads "$workloads" --run --json "$out/fidelity.jsonl" \
        --record-runs "${RECORD_RUNS:-2}" ${FIDELITY_ARGS:-}
fi
if [[ ",$mode," == *,shares,* ]]; then
    python3 -m gpu_agent record --duty-cycle 10 -o "$out/shares.pb.gz" -- python3 bench/gpu/fidelity.py 300000 2>&1 | grep "gpu-agent: processes"
    python3 bench/gpu/check_fidelity.py "$out/shares.pb.gz" 300000 "${PPROF:-}"
fi
if [[ ",$mode," == *,interval,* ]]; then
    python3 bench/gpu/interval_accuracy.py "$out/interval" --interval 5 --seconds 40 --setting 10:20
fi
