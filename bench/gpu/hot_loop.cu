// A kernel with a known hot loop, for gpu-agent's PC sampling check on a GPU:
// the same hot_loop as bench/gpu/pc_sampling.cu (its line HOT_LINE holds most
// samples there), but no CUPTI of its own, so the shim can take it. Launches it
// for SECONDS and prints one JSON line: launches and us per launch (GPU-bound:
// what PC sampling's cost shows in).
//   nvcc -O3 -lineinfo -o hot_loop hot_loop.cu && ./hot_loop [SECONDS=5]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void hot_loop(float *x, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int k = 0; k < iters; k++) {
        v = __sinf(v) * 1.0001f + 0.5f;  // HOT_LINE: most samples land here
    }
    x[i] = v;
}

__attribute__((noinline)) static void launch_batch(float *d, int n, int iters, int count) {
    for (int l = 0; l < count; l++) hot_loop<<<(n + 255) / 256, 256>>>(d, n, iters);
    cudaDeviceSynchronize();
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    const int n = 1 << 20, iters = 2000, batch = 20;
    float *d;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) return 1;
    cudaMemset(d, 0, n * sizeof(float));
    launch_batch(d, n, iters, 3);  // module loaded, clocks up
    auto t0 = std::chrono::steady_clock::now();
    long launches = 0;
    double elapsed = 0;
    while (elapsed < seconds) {
        launch_batch(d, n, iters, batch);
        launches += batch;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    printf("{\"launches\": %ld, \"us_per_launch\": %.2f}\n", launches, elapsed * 1e6 / launches);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
