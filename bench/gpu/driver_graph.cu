// Real-GPU check for issue 5: a driver-API cuGraphLaunch replay (the TensorRT-LLM path).
// Two kernels are captured from two distinctly named host functions, then the exec
// graph is replayed with cuGraphLaunch (driver API). Under gpu-agent the replayed
// kernels must sit under [cuda graph replay] <- capture_scale / capture_bias.
//   nvcc -O1 -g -o driver_graph bench/gpu/driver_graph.cu -lcuda
// `driver_graph STEPS --bench` instead times the replays for bench/gpu/run_overhead.py:
// a warm-up, then 5 repeats of STEPS replays, and prints {"us_per_step": median}.
// `driver_graph STEPS --bench SECONDS` repeats STEPS replays until SECONDS have passed
// and prints the time average (total / replays): duty-cycled collection costs only
// inside its windows, which a median of short repeats would skip (overhead.py).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

__global__ void scale_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 1.0001f;
}
__global__ void bias_kernel(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 0.5f;
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define CKD(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { \
    fprintf(stderr, "%s: %d\n", #x, (int)r); exit(1); } } while (0)

__attribute__((noinline)) void capture_scale(float *x, int n, cudaStream_t s) {
    for (int k = 0; k < 3; k++) scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(x, n);
    CK(cudaGetLastError());
}
__attribute__((noinline)) void capture_bias(float *x, int n, cudaStream_t s) {
    bias_kernel<<<(n + 255) / 256, 256, 0, s>>>(x, n);
    CK(cudaGetLastError());
}
__attribute__((noinline)) void replay_with_driver_api(CUgraphExec exec, CUstream s, int iters) {
    for (int i = 0; i < iters; i++) CKD(cuGraphLaunch(exec, s));
    CKD(cuStreamSynchronize(s));
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 2000, n = 1 << 20;
    float *x;
    cudaStream_t s;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    capture_scale(x, n, s);
    capture_bias(x, n, s);
    CK(cudaStreamEndCapture(s, &g));
    CUgraphExec exec;
    CKD(cuGraphInstantiate(&exec, (CUgraph)g, 0));
    if (argc > 2 && !strcmp(argv[2], "--bench")) {
        replay_with_driver_api(exec, (CUstream)s, iters / 4 + 1);
        double seconds = argc > 3 ? atof(argv[3]) : 0;
        if (seconds > 0) {
            long n = 0;
            auto t0 = std::chrono::steady_clock::now();
            std::chrono::duration<double, std::micro> d{};
            do {
                replay_with_driver_api(exec, (CUstream)s, iters);
                n += iters;
                d = std::chrono::steady_clock::now() - t0;
            } while (d.count() < seconds * 1e6);
            printf("{\"workload\": \"driver-graph\", \"us_per_step\": %.3f}\n", d.count() / n);
            return 0;
        }
        /* `--bench 0 WAIT REPEATS` (python -m bench.gpu): sleep WAIT s first, so that an
         * agent already running has attached, then the median of REPEATS blocks. */
        if (argc > 4) usleep((useconds_t)(atof(argv[4]) * 1e6));
        int repeats = argc > 5 ? atoi(argv[5]) : 5;
        if (repeats < 1 || repeats > 64) repeats = 5;
        double us[64];
        for (int r = 0; r < repeats; r++) {
            auto t0 = std::chrono::steady_clock::now();
            replay_with_driver_api(exec, (CUstream)s, iters);
            std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
            us[r] = d.count() / iters;
        }
        std::sort(us, us + repeats);
        printf("{\"workload\": \"driver-graph\", \"us_per_step\": %.3f, \"blocks\": [", us[repeats / 2]);
        for (int r = 0; r < repeats; r++) printf("%s%.3f", r ? ", " : "", us[r]);
        printf("]}\n");
        return 0;
    }
    replay_with_driver_api(exec, (CUstream)s, iters);
    printf("driver_graph: %d cuGraphLaunch replays of 4 kernels\n", iters);
    return 0;
}
