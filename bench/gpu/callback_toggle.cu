// Do CUPTI's launch callbacks fire at once when a subscriber turns them on again?
// No shim, no agent (docs/benchmarks.md, "Count pieces"):
//   callback_toggle MODE PIECES PIECE_MS GAP_MS
// One thread launches an empty kernel (cuLaunchKernel) as fast as it can, counting
// its launches; the main thread subscribes once and, PIECES times, turns the
// cuLaunchKernel callback on for PIECE_MS and off for GAP_MS. MODE:
//   cbid    cuptiEnableCallback on the launch cbid alone (the shim's way)
//   keep    the same, with another driver callback (cuInit's, never called again)
//           on throughout, so that the driver domain never has none
//   domain  cuptiEnableDomain(DRIVER_API) on and off
//   resub   a new subscription for each piece (cuptiUnsubscribe, cuptiSubscribe,
//           cuInit's callback on as the shim's resource callbacks are), then the
//           launch cbid on; off at the piece's end
// Per piece: launches made while it was on, callbacks it got, the delay from the
// enable's return to the first callback. One JSON line per piece.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

__global__ void empty() {}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static std::atomic<long> g_launches{0}, g_callbacks{0};
static std::atomic<double> g_first{0};
static std::atomic<int> g_stop{0};

static void CUPTIAPI on_cb(void *, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    auto *cb = (const CUpti_CallbackData *)data;
    if (d != CUPTI_CB_DOMAIN_DRIVER_API || id != CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) return;
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    if (g_callbacks.fetch_add(1) == 0) g_first.store(now_us());
}

#define CK(x) do { auto r_ = (x); if (r_ != 0) { fprintf(stderr, "%s: %d\n", #x, (int)r_); return 1; } } while (0)

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: callback_toggle cbid|keep|domain PIECES PIECE_MS GAP_MS\n");
        return 2;
    }
    const char *mode = argv[1];
    int pieces = atoi(argv[2]);
    double piece_ms = atof(argv[3]), gap_ms = atof(argv[4]);
    CK(cudaFree(0));
    cudaFunction_t rf;
    CK(cudaGetFuncBySymbol(&rf, (const void *)empty));
    CUfunction f = (CUfunction)rf;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    std::thread launcher([&] {
        cuCtxSetCurrent(ctx);
        while (!g_stop.load(std::memory_order_relaxed)) {
            for (int i = 0; i < 64; i++) {
                cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
                g_launches.fetch_add(1, std::memory_order_relaxed);
            }
            cuStreamSynchronize(s);
        }
    });
    CUpti_SubscriberHandle sub;
    CK(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_cb, nullptr));
    if (!strcmp(mode, "keep") || !strcmp(mode, "resub")) CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuInit));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int p = 0; p < pieces; p++) {
        g_callbacks.store(0), g_first.store(0);
        double t0 = now_us();
        if (!strcmp(mode, "resub") && p > 0) {
            CK(cuptiUnsubscribe(sub));
            CK(cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_cb, nullptr));
            CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuInit));
        }
        if (!strcmp(mode, "domain")) CK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API));
        else CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
        double t1 = now_us();
        long l0 = g_launches.load();
        std::this_thread::sleep_for(std::chrono::microseconds((long)(piece_ms * 1000)));
        long l1 = g_launches.load();
        double t2 = now_us();
        if (!strcmp(mode, "domain")) CK(cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_DRIVER_API));
        else CK(cuptiEnableCallback(0, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
        double t3 = now_us();
        long cbs = g_callbacks.load();
        std::this_thread::sleep_for(std::chrono::microseconds((long)(gap_ms * 1000)));
        long late = g_callbacks.load() - cbs;  // callbacks after the disable returned
        double first = g_first.load();
        printf("{\"mode\": \"%s\", \"piece\": %d, \"piece_ms\": %.1f, \"launches\": %ld, \"callbacks\": %ld, "
               "\"late_callbacks\": %ld, \"first_cb_us\": %.1f, \"enable_us\": %.1f, \"disable_us\": %.1f}\n",
               mode, p, piece_ms, l1 - l0, cbs, late, first > 0 ? first - t1 : -1.0, t1 - t0, t3 - t2);
    }
    g_stop.store(1);
    launcher.join();
    cuptiUnsubscribe(sub);
    return 0;
}
