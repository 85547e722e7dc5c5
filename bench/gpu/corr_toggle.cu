// Do a launch callback and its kernel record still carry the same correlation id
// when the callbacks were turned off and on again before kernel activity went on?
// No shim, no agent (docs/benchmarks.md, "Count pieces"):
//   corr_toggle free|nofree CYCLES
// One thread launches kernels a and b in turn as fast as it can; the main thread,
// each cycle: subscribes, (free) turns the cuLaunchKernel callback on for 30 ms and
// off for 30 ms, turns it on again (the count phase) for 30 ms, turns kernel
// activity on for 30 ms (the window) and off, flushes, unsubscribes and finalizes
// at the launcher's next API exit (as the shim does). Per cycle: the window's
// records whose correlation id's callback saw the other kernel.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>


__global__ void ka() {}
__global__ void kb() {}

static CUfunction g_fa, g_fb;
static std::mutex g_mu;
static std::unordered_map<uint32_t, int> g_cb;   // correlation id -> 0 (a) / 1 (b), while the window is on
static std::vector<std::pair<uint32_t, int>> g_rec;
static std::atomic<int> g_window{0}, g_fin_req{0}, g_fin_done{0}, g_stop{0};
static CUpti_SubscriberHandle g_sub;

static void CUPTIAPI on_cb(void *, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    auto *cb = (const CUpti_CallbackData *)data;
    if (d != CUPTI_CB_DOMAIN_DRIVER_API || id != CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) return;
    if (cb->callbackSite == CUPTI_API_EXIT) {
        if (g_fin_req.exchange(0)) {
            cuptiUnsubscribe(g_sub);
            cuptiFinalize();
            g_fin_done.store(1);
        }
        return;
    }
    if (!g_window.load()) return;
    auto *p = (const cuLaunchKernel_params *)cb->functionParams;
    std::lock_guard<std::mutex> l(g_mu);
    g_cb[cb->correlationId] = p->f == g_fb;
}

static void CUPTIAPI buf_req(uint8_t **b, size_t *n, size_t *max) {
    *n = 8 << 20;
    *b = (uint8_t *)aligned_alloc(8, *n);
    *max = 0;
}
static void CUPTIAPI buf_done(CUcontext, uint32_t, uint8_t *b, size_t, size_t valid) {
    CUpti_Activity *r = nullptr;
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        auto *k = (CUpti_ActivityKernel10 *)r;
        std::lock_guard<std::mutex> l(g_mu);
        uint32_t corr = k->correlationId;
        g_rec.push_back({corr, strstr(k->name, "kb") != nullptr});
    }
    free(b);
}

#define CK(x) do { auto r_ = (x); if (r_ != 0) { fprintf(stderr, "%s: %d\n", #x, (int)r_); return 1; } } while (0)
static void ms(int n) { std::this_thread::sleep_for(std::chrono::milliseconds(n)); }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    bool free_piece = !strcmp(argv[1], "free");
    int cycles = atoi(argv[2]);
    CK(cudaFree(0));
    cudaFunction_t fa, fb;
    CK(cudaGetFuncBySymbol(&fa, (const void *)ka));
    CK(cudaGetFuncBySymbol(&fb, (const void *)kb));
    g_fa = (CUfunction)fa, g_fb = (CUfunction)fb;
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUcontext ctx;
    CK(cuCtxGetCurrent(&ctx));
    std::thread launcher([&] {
        cuCtxSetCurrent(ctx);
        for (long i = 0; !g_stop.load(std::memory_order_relaxed); i++) {
            cuLaunchKernel(i % 2 ? g_fb : g_fa, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
            if (i % 64 == 63) cuStreamSynchronize(s);
        }
    });
    for (int c = 0; c < cycles; c++) {
        CK(cuptiActivityRegisterCallbacks(buf_req, buf_done));
        CK(cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)on_cb, nullptr));
        auto on = [&](int e) { return cuptiEnableCallback(e, g_sub, CUPTI_CB_DOMAIN_DRIVER_API,
                                                          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel); };
        if (free_piece) {
            CK(on(1));
            ms(30);
            CK(on(0));
            ms(30);
        }
        CK(on(1));
        ms(30);
        CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        g_window.store(1);
        ms(30);
        g_window.store(0);
        CK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        CK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
        long joined = 0, wrong = 0, unseen = 0;
        {
            std::lock_guard<std::mutex> l(g_mu);
            for (auto &[corr, isb] : g_rec) {
                auto it = g_cb.find(corr);
                if (it == g_cb.end()) unseen++;
                else if (it->second != isb) wrong++;
                else joined++;
            }
            g_rec.clear();
            g_cb.clear();
        }
        g_fin_req.store(1);
        while (!g_fin_done.load()) ms(1);
        g_fin_done.store(0);
        printf("{\"mode\": \"%s\", \"cycle\": %d, \"right\": %ld, \"wrong_kernel\": %ld, \"no_callback\": %ld}\n",
               argv[1], c, joined, wrong, unseen);
        fflush(stdout);
        ms(20);
    }
    g_stop.store(1);
    launcher.join();
    return 0;
}
