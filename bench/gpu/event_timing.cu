// Can CUDA events time kernels instead of CUPTI kernel activity? (issue 17: any
// process whose CONCURRENT_KERNEL activity was once enabled pays ~1 us per launch
// for good; events leave no such state behind.) No shim, no agent, one process:
//   event_timing [LAUNCHES]
// Prints JSON lines:
//  - "cost": ns per launch of an empty kernel, plain, and with 1 launch in 64 (or
//    every launch) bracketed by two events, with and without a gate: the bracket's
//    first event waits (cuStreamWaitValue32 on host-mapped memory) until the launch
//    call has returned, so the kernel is already queued behind it and the bracket
//    holds no CPU launch time. Then with an empty CUPTI launch callback subscribed
//    (what counting launches costs), and after unsubscribing.
//  - "accuracy": for spin kernels of several lengths, the mean bracket (B - A) in a
//    launch-bound loop and behind a long kernel (GPU-bound), with and without the
//    gate; then CUPTI CONCURRENT_KERNEL's mean duration of the same kernels (the
//    truth), enabled last because it leaves its residual behind.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

__global__ void empty_kernel(int) {}

__global__ void spin_kernel(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < ns);
}

static CUstream g_s;
static volatile uint32_t *g_flag;  // host-mapped gate word
static CUdeviceptr g_dflag;
static uint32_t g_seq;

struct Pair { CUevent a, b; bool used; };
static std::vector<Pair> g_pairs;
static size_t g_next;
static double g_sum_us;
static long g_n_timed;

static void harvest(Pair &p) {
    if (!p.used) return;
    cuEventSynchronize(p.b);
    float ms = 0;
    if (cuEventElapsedTime(&ms, p.a, p.b) == CUDA_SUCCESS) { g_sum_us += ms * 1000.0; g_n_timed++; }
    p.used = false;
}

static void reset_timing() {
    for (auto &p : g_pairs) harvest(p);
    g_sum_us = 0;
    g_n_timed = 0;
}

template <typename L> static void bracketed(bool gate, L launch) {
    Pair &p = g_pairs[g_next++ % g_pairs.size()];
    harvest(p);
    if (gate) cuStreamWaitValue32(g_s, g_dflag, g_seq + 1, CU_STREAM_WAIT_VALUE_GEQ);
    cuEventRecord(p.a, g_s);
    launch();
    cuEventRecord(p.b, g_s);
    if (gate) { __sync_synchronize(); *g_flag = ++g_seq; }
    p.used = true;
}

// every: bracket 1 launch in `every` (0: none)
template <typename L> static double loop_ns(int n, int every, bool gate, L launch) {
    double ns[5];
    for (int r = 0; r < 5; r++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; i++) {
            if (every && i % every == every - 1) bracketed(gate, launch);
            else launch();
            if ((i & 63) == 63) cuStreamSynchronize(g_s);
        }
        cuStreamSynchronize(g_s);
        std::chrono::duration<double, std::nano> d = std::chrono::steady_clock::now() - t0;
        ns[r] = d.count() / n;
    }
    std::sort(ns, ns + 5);
    return ns[2];
}

static void CUPTIAPI empty_cb(void *, CUpti_CallbackDomain, CUpti_CallbackId, const void *) {}

static std::map<long long, std::pair<double, long>> g_truth;  // spin ns -> sum ns, count
static long long g_cur_len;  // the spin length whose records the next flush delivers
static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *size = 8 << 20;
    *buf = (uint8_t *)aligned_alloc(8, *size);
    *max_records = 0;
}
static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid) {
    CUpti_Activity *rec = nullptr;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        auto *k = (CUpti_ActivityKernel9 *)rec;
        auto &t = g_truth[g_cur_len];
        t.first += (double)(k->end - k->start);
        t.second++;
    }
    free(buf);
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50000;
    cudaFree(0);
    cuStreamCreate(&g_s, CU_STREAM_NON_BLOCKING);
    void *h = nullptr;
    if (cuMemHostAlloc(&h, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS ||
        cuMemHostGetDevicePointer(&g_dflag, h, 0) != CUDA_SUCCESS) {
        printf("{\"error\": \"host-mapped memory\"}\n");
        return 1;
    }
    g_flag = (volatile uint32_t *)h;
    *g_flag = 0;
    int memops = 0;
    CUdevice dev;
    cuCtxGetDevice(&dev);
    cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
    g_pairs.resize(1024);
    for (auto &p : g_pairs) { cuEventCreate(&p.a, CU_EVENT_DEFAULT); cuEventCreate(&p.b, CU_EVENT_DEFAULT); p.used = false; }
    cudaStream_t rs = (cudaStream_t)g_s;
    auto empty = [&]() { empty_kernel<<<1, 32, 0, rs>>>(0); };
    loop_ns(n / 4, 0, false, empty);  // warm-up

    // ---- cost ----
    double plain = loop_ns(n, 0, false, empty);
    double b64 = loop_ns(n, 64, false, empty);
    double g64 = loop_ns(n, 64, true, empty);
    double b1 = loop_ns(n / 4, 1, false, empty);
    double g1 = loop_ns(n / 4, 1, true, empty);
    double plain2 = loop_ns(n, 0, false, empty);
    reset_timing();
    CUpti_SubscriberHandle sub;
    cuptiSubscribe(&sub, empty_cb, nullptr);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    double cb = loop_ns(n, 0, false, empty);
    double cb_g64 = loop_ns(n, 64, true, empty);
    cuptiEnableCallback(0, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    cuptiUnsubscribe(sub);
    double after_cb = loop_ns(n, 0, false, empty);
    printf("{\"what\": \"cost\", \"memops\": %d, \"launches\": %d, \"plain\": %.1f, \"bracket_1in64\": %.1f, "
           "\"gated_1in64\": %.1f, \"bracket_every\": %.1f, \"gated_every\": %.1f, \"plain_again\": %.1f, "
           "\"callback\": %.1f, \"callback_gated_1in64\": %.1f, \"after_unsubscribe\": %.1f}\n",
           memops, n, plain, b64, g64, b1, g1, plain2, cb, cb_g64, after_cb);
    fflush(stdout);

    // ---- accuracy ----
    const long long lens[] = {0, 1000, 2000, 5000, 20000};
    const int reps = 4000;
    for (long long len : lens) {
        auto k = [&]() { if (len) spin_kernel<<<1, 32, 0, rs>>>(len); else empty_kernel<<<1, 32, 0, rs>>>(0); };
        auto blocker = [&]() { spin_kernel<<<1, 32, 0, rs>>>(50000); };
        double res[4];
        for (int mode = 0; mode < 4; mode++) {
            bool gate = mode & 1, behind = mode & 2;
            for (auto &p : g_pairs) harvest(p);
            g_sum_us = 0; g_n_timed = 0;
            for (int i = 0; i < reps; i++) {
                if (behind) blocker();
                bracketed(gate, k);
                if (!behind && (i & 7) == 7) cuStreamSynchronize(g_s);
                if (behind) cuStreamSynchronize(g_s);
            }
            cuStreamSynchronize(g_s);
            for (auto &p : g_pairs) harvest(p);
            res[mode] = g_n_timed ? g_sum_us * 1000.0 / g_n_timed : -1;
        }
        printf("{\"what\": \"accuracy\", \"spin_ns\": %lld, \"bracket_launch_bound\": %.1f, \"gated_launch_bound\": %.1f, "
               "\"bracket_behind\": %.1f, \"gated_behind\": %.1f}\n",
               len, res[0], res[1], res[2], res[3]);
        fflush(stdout);
    }
    // the truth: CUPTI's durations of the same kernels, launch-bound
    cuptiActivityRegisterCallbacks(requested, completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    for (long long len : lens) {
        for (int i = 0; i < reps; i++) {
            if (len) spin_kernel<<<1, 32, 0, rs>>>(len); else empty_kernel<<<1, 32, 0, rs>>>(0);
            if ((i & 7) == 7) cuStreamSynchronize(g_s);
        }
        cuStreamSynchronize(g_s);
        g_cur_len = len;
        cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    g_cur_len = -1;
    // and brackets while CUPTI is on
    double on_br[5];
    int li = 0;
    for (long long len : lens) {
        auto k = [&]() { if (len) spin_kernel<<<1, 32, 0, rs>>>(len); else empty_kernel<<<1, 32, 0, rs>>>(0); };
        for (auto &p : g_pairs) harvest(p);
        g_sum_us = 0; g_n_timed = 0;
        for (int i = 0; i < reps; i++) {
            bracketed(true, k);
            if ((i & 7) == 7) cuStreamSynchronize(g_s);
        }
        cuStreamSynchronize(g_s);
        for (auto &p : g_pairs) harvest(p);
        on_br[li++] = g_n_timed ? g_sum_us * 1000.0 / g_n_timed : -1;
    }
    li = 0;
    for (long long len : lens) {
        auto &t = g_truth[len];
        printf("{\"what\": \"truth\", \"spin_ns\": %lld, \"cupti_mean\": %.1f, \"cupti_n\": %ld, \"gated_with_cupti_on\": %.1f}\n",
               len, t.second ? t.first / t.second : -1.0, t.second, on_br[li++]);
    }
    return 0;
}
