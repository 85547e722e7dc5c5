#!/usr/bin/env bash
# bench/gpu/teardown_cycle.cu's configurations, one process each, on a GPU node
# (docs/benchmarks.md, "Teardown"): bench/gpu/teardown_cycle.sh OUT.jsonl [all|threads|graphs]
set -u
out=${1:-teardown_cycle.jsonl}
cuda=${CUDA_HOME:-/usr/local/cuda}
inc=$(dirname "$(find "$cuda"/ -name cupti.h | head -1)")
lib=$(dirname "$(find "$cuda"/ -name 'libcupti.so*' | head -1)")
bin=build/bench/teardown_cycle
mkdir -p build/bench
nvcc -O2 -arch=sm_90 -I"$inc" -o $bin bench/gpu/teardown_cycle.cu -L"$lib" -Xlinker -rpath="$lib" -lcupti -lcuda -lpthread || exit 1
run() { # ARGS...
    timeout 120 $bin "$@" >>"$out" 2>/tmp/tc.err; rc=$?
    [ $rc = 0 ] || echo "{\"args\": \"$*\", \"rc\": $rc, \"stderr\": \"$(tail -c 300 /tmp/tc.err | tr '\n"' ' .')\"}" >>"$out"
}
case "${2:-all}" in
all)
    for round in 1 2 3; do
        for fin in exit none poller; do
            for resub in poller app; do run $fin $resub 1 20 50 100; done
        done
    done ;;
esac
case "${2:-all}" in
all|threads)
    TC_GRAPHS=none run exit poller 2 100 20 20    # two eager threads
    TC_GRAPHS=none run exit poller 5 100 20 20    # five eager threads
    run exit poller 5 300 20 20                   # 3 eager threads + cudaGraphLaunch + cuGraphLaunch replays
    run exit app 5 300 20 20
    run poller poller 5 100 20 20                 # finalize from the poller while threads launch
    run exit poller 1 10 50 300 2000 ;;           # GPU-bound: 2 ms kernels, 256 queued
esac
# Which graphs keep CUPTI from starting again after a finalize (CUPTI_ERROR_NOT_INITIALIZED)
TC_GRAPHS=idle run exit poller 3 50 20 20         # instantiated, never launched
TC_GRAPHS=destroyed run exit poller 3 50 20 20    # replayed, then destroyed before the cycles
run exit poller 3 50 20 20                        # replayed throughout
