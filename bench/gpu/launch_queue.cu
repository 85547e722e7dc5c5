// How many kernels a stream holds queued before a launch blocks (the depth the
// mock's launch queue models, shim/mock MOCK_QUEUE_DEPTH): a kernel that spins
// SPIN_US microseconds is launched N times back to back on one stream; each
// launch call's host time is recorded. Launches return in a few microseconds
// while the queue has room; once it is full each one waits about a kernel's
// time. Prints the first launch index whose call took over half a kernel's time,
// and the median call time before and after it.
//   launch_queue [N=8192] [SPIN_US=50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

__global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8192;
    double spin_us = argc > 2 ? atof(argv[2]) : 50;
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    long long cycles = (long long)(spin_us * clock_khz / 1000.0);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    spin<<<1, 1, 0, s>>>(10);  // context and module up
    cudaStreamSynchronize(s);
    std::vector<double> us(n);
    for (int i = 0; i < n; i++) {
        auto t0 = std::chrono::steady_clock::now();
        spin<<<1, 1, 0, s>>>(cycles);
        us[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    cudaStreamSynchronize(s);
    int first = -1;
    for (int i = 0; i < n; i++)
        if (us[i] > spin_us / 2) { first = i; break; }
    std::vector<double> before(us.begin(), us.begin() + (first < 0 ? n : first));
    std::vector<double> after(first < 0 ? us.end() : us.begin() + first, us.end());
    printf("{\"launches\": %d, \"spin_us\": %.1f, \"first_blocked_launch\": %d, "
           "\"median_call_us_before\": %.2f, \"median_call_us_after\": %.2f}\n",
           n, spin_us, first, median(before), median(after));
    return 0;
}
