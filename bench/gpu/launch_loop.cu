// The launch path alone: an empty kernel launched with `<<<>>>` in a loop, with
// a stream sync every 64 launches so that the queue never fills and the loop
// stays bound by the CPU cost of a launch. Prints the median ns per launch of
// REPEATS blocks, after WAIT seconds (an agent that is running has attached by
// then). The differences between shim states are the shim's and CUPTI's cost
// per launch (python -m bench.gpu overhead --workloads launch).
//   launch_loop LAUNCHES --bench 0 WAIT REPEATS
// `launch_loop 0 --trace SECONDS` instead launches for SECONDS and prints the ns
// per launch of every 5 ms, with its CLOCK_MONOTONIC start: what a launch costs
// before an agent attaches, inside and between its windows, and after it leaves
// (python -m bench.gpu overhead --method timeline).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda_runtime.h>
#include <unistd.h>
#include <vector>

__global__ void empty_kernel(int) {}

static double block_ns(int n, cudaStream_t s) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
        empty_kernel<<<1, 32, 0, s>>>(i);
        if ((i & 63) == 63) cudaStreamSynchronize(s);
    }
    cudaStreamSynchronize(s);
    std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
    return d.count() / n;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int trace(double seconds, cudaStream_t s) {
    struct Bucket { double t0; long launches; double secs; };
    std::vector<Bucket> out;
    double start = mono_s(), t0 = start;
    long launches = 0;
    for (int i = 0;; i++) {
        empty_kernel<<<1, 32, 0, s>>>(i);
        launches++;
        if ((i & 63) != 63) continue;
        cudaStreamSynchronize(s);
        double now = mono_s();
        if (now - t0 < 0.005) continue;
        out.push_back({t0, launches, now - t0});
        t0 = now, launches = 0;
        if (now - start >= seconds) break;
    }
    printf("{\"workload\": \"launch\", \"trace\": [");
    for (size_t i = 0; i < out.size(); i++)
        printf("%s[%.4f, %.1f]", i ? ", " : "", out[i].t0, out[i].secs * 1e9 / out[i].launches);
    printf("]}\n");
    return 0;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200000;
    double wait = argc > 4 ? atof(argv[4]) : 0;
    int repeats = argc > 5 ? atoi(argv[5]) : 5;
    if (repeats < 1 || repeats > 64) repeats = 5;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "launch_loop: no CUDA device\n");
        return 1;
    }
    if (argc > 3 && !strcmp(argv[2], "--trace")) return trace(atof(argv[3]), s);
    block_ns(n / 8 + 1, s);  // warm-up
    usleep((useconds_t)(wait * 1e6));
    double ns[64];
    for (int r = 0; r < repeats; r++) ns[r] = block_ns(n, s);
    double sorted[64];
    std::copy(ns, ns + repeats, sorted);
    std::sort(sorted, sorted + repeats);
    // us_per_step: one launch is the step here
    printf("{\"workload\": \"launch\", \"us_per_step\": %.4f, \"blocks\": [", sorted[repeats / 2] / 1000);
    for (int r = 0; r < repeats; r++) printf("%s%.4f", r ? ", " : "", ns[r] / 1000);
    printf("]}\n");
    return 0;
}
