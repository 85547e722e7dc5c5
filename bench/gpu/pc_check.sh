#!/usr/bin/env bash
# PC sampling on a GPU (issue 21): where the hot loop's samples land (source line,
# stall reason, launching function), what a PyTorch model's look like, and what
# sampling costs a job. From the repository root, as root, with the agent's
# dependencies in place (bench/gpu/device.sh's first lines); results under $OUT.
#   bench/gpu/pc_check.sh [ROUNDS=3]
set -uo pipefail
rounds=${1:-3}
out=${OUT:-/tmp/pc_check}
mkdir -p "$out/run"
nvcc -O3 -lineinfo -o "$out/hot_loop" bench/gpu/hot_loop.cu || exit 1
report() { echo "== $1"; python3 -m bench.gpu.pc_report "$out/$1.pb.gz" --under "${@:2}"; }

# 1. Where the samples land: continuous (record's default), then the always-on
#    default's windows (one 20 ms window in 10).
GPU_AGENT_PC_SAMPLING=1 timeout 90 python3 -m gpu_agent record -o "$out/hot_d1.pb.gz" -- "$out/hot_loop" 4
report hot_d1 launch_batch main
GPU_AGENT_PC_SAMPLING=1 timeout 90 python3 -m gpu_agent record --duty-cycle 10 -o "$out/hot_d10.pb.gz" -- "$out/hot_loop" 4
report hot_d10 launch_batch main
GPU_AGENT_PC_SAMPLING=1 timeout 90 python3 -m gpu_agent record --duty-cycle 10 -o "$out/mlp.pb.gz" -- \
    python3 -m bench.gpu.cases mlp --steps 3000 --repeats 2 --wait 0.5
report mlp forward step

# 2. What it costs the hot loop (GPU-bound): separate processes beside one
#    `gpu-agent run` at its defaults; no shim, shim with sampling off, on.
python3 -m gpu_agent run --output-dir "$out/run" --interval 5s 2>"$out/run.log" &
agent=$!
sleep 6
shim=$PWD/build/libgpu_agent_shim.so
for r in $(seq "$rounds"); do
    for cfg in baseline agent agent-pcs; do
        case $cfg in
        baseline) env -u CUDA_INJECTION64_PATH "$out/hot_loop" 4 ;;
        agent) CUDA_INJECTION64_PATH=$shim "$out/hot_loop" 4 ;;
        agent-pcs) CUDA_INJECTION64_PATH=$shim GPU_AGENT_PC_SAMPLING=1 "$out/hot_loop" 4 ;;
        esac | sed "s/^/{\"round\": $r, \"config\": \"$cfg\", \"result\": /; s/$/}/"
    done
done
kill -TERM $agent; wait $agent
tail -3 "$out/run.log"
