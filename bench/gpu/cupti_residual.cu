// What a launch costs after CUPTI kernel activity was on, by the way it was
// switched on and off (docs/benchmarks.md, "Where the cost goes": a process whose
// CONCURRENT_KERNEL activity was enabled once pays about 1 us more per launch for
// good, with the activity disabled). One process per mode, no shim, no agent:
//   cupti_residual MODE [LAUNCHES]
// MODE: none (buffers registered, nothing enabled), global (cuptiActivityEnable),
// context (cuptiActivityEnableContext on the current context), kernel (the
// serialized KERNEL kind), latency0 (latency timestamps off first), hwtrace
// (cuptiActivityEnableHWTrace(1) first: Blackwell only), finalize (cuptiFinalize
// after the disable).
// Prints one JSON line: ns per launch of an empty kernel before, while on, after
// the disable and flush, and after for a kernel never launched while on.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

__global__ void seen_kernel(int) {}
__global__ void fresh_kernel(int) {}

template <typename F> static double median_ns(int n, cudaStream_t s, F launch) {
    double ns[5];
    for (int r = 0; r < 5; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; i++) {
            launch(i);
            if ((i & 63) == 63) cudaStreamSynchronize(s);
        }
        cudaStreamSynchronize(s);
        std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
        ns[r] = d.count() / n;
    }
    std::sort(ns, ns + 5);
    return ns[2];
}

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buf = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}

static size_t g_records;
static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid) {
    CUpti_Activity *rec = nullptr;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) g_records++;
    free(buf);
}

#define CK(call) do { CUptiResult r_ = (call); if (r_ != CUPTI_SUCCESS) { \
    const char *m_ = ""; cuptiGetResultString(r_, &m_); \
    printf("{\"mode\": \"%s\", \"error\": \"%s: %s\"}\n", mode, #call, m_); return 1; } } while (0)

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "global";
    int n = argc > 2 ? atoi(argv[2]) : 50000;
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return 1;
    auto seen = [&](int i) { seen_kernel<<<1, 32, 0, s>>>(i); };
    auto fresh = [&](int i) { fresh_kernel<<<1, 32, 0, s>>>(i); };
    median_ns(n / 4, s, seen);  // warm-up
    double before = median_ns(n, s, seen);
    CUcontext ctx = nullptr;
    cuCtxGetCurrent(&ctx);
    CK(cuptiActivityRegisterCallbacks(requested, completed));
    bool ctx_mode = !strcmp(mode, "context");
    CUpti_ActivityKind kind = !strcmp(mode, "kernel") ? CUPTI_ACTIVITY_KIND_KERNEL
                                                      : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    if (!strcmp(mode, "latency0")) CK(cuptiActivityEnableLatencyTimestamps(0));
    if (!strcmp(mode, "hwtrace")) CK(cuptiActivityEnableHWTrace(1));
    bool enable = strcmp(mode, "none") != 0;
    if (enable) {
        if (ctx_mode) CK(cuptiActivityEnableContext(ctx, kind));
        else CK(cuptiActivityEnable(kind));
    }
    double on = median_ns(n, s, seen);
    if (enable) {
        if (ctx_mode) CK(cuptiActivityDisableContext(ctx, kind));
        else CK(cuptiActivityDisable(kind));
    }
    CK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    size_t records = g_records;
    if (!strcmp(mode, "finalize")) CK(cuptiFinalize());
    double after = median_ns(n, s, seen);
    double after_fresh = median_ns(n, s, fresh);
    printf("{\"mode\": \"%s\", \"launches\": %d, \"before\": %.1f, \"on\": %.1f, \"after\": %.1f, "
           "\"after_fresh_kernel\": %.1f, \"records\": %zu}\n",
           mode, n, before, on, after, after_fresh, records);
    return 0;
}
