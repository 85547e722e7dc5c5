// Which thread may tear CUPTI down and which may subscribe again, with threads
// launching meanwhile (docs/benchmarks.md, "Teardown"). No shim, no agent:
//   teardown_cycle FIN RESUB THREADS CYCLES [WINDOW_MS GAP_MS KERNEL_US]
// FIN: exit (unsubscribe + cuptiFinalize in the first driver API-exit callback of
//      any application thread, after a forced flush from the "poller"), poller (the
//      same from the poller thread), none (unsubscribe only: the residual stays).
// RESUB: poller (the poller thread subscribes for the next window), app (launching
//      thread 0 does, between two launches).
// THREADS: launching threads; thread 1 (when THREADS >= 3) replays a 4-node CUDA
//      graph with cudaGraphLaunch, thread 2 with the driver's cuGraphLaunch.
// Each cycle: subscribe, driver-domain callbacks on (a callback-only phase of
// WINDOW_MS / 2), kernel activity on for WINDOW_MS, off, forced flush, teardown,
// GAP_MS without CUPTI. Prints one JSON line: per cycle the callbacks and kernel
// records against the launches surely inside the window (enter and exit both in
// it) and possibly in it; ns per launch of thread 0 before, between windows and
// after; finalize and enable times.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

__global__ void spin(long long ns) {
    if (ns <= 0) return;
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (;;) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if ((long long)(t - t0) >= ns) return;
    }
}

static double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum { PH_BEFORE, PH_SUB, PH_WINDOW, PH_TEARDOWN, PH_GAP, PH_AFTER, PH_N };
static std::atomic<int> g_phase{PH_BEFORE};
static std::atomic<int> g_window{0};      // set after ActivityEnable returned, cleared before Disable
static std::atomic<int> g_maybe_on{0};    // set before ActivityEnable is called, cleared after Disable returned
static std::atomic<long> g_callbacks{0};  // launch callbacks (enter) this cycle
static std::atomic<long> g_sure{0}, g_maybe{0}, g_records{0};
static std::atomic<int> g_teardown{0}, g_torn{0}, g_resub_req{0}, g_stop{0};
static CUpti_SubscriberHandle g_sub;
static bool g_registered;  // activity callbacks: finalize forgets them
static double g_fin_us, g_enable_us;
static bool g_is_launch[CUPTI_DRIVER_TRACE_CBID_SIZE];
static int g_nodes[CUPTI_DRIVER_TRACE_CBID_SIZE];  // records per launch: 1, or GRAPH_NODES
static const int GRAPH_NODES = 4;
static const char *g_fin = "exit";
static thread_local int t_enter_window, t_enter_maybe;
static std::atomic<long> g_retries{0};    // CUPTI_ERROR_NOT_INITIALIZED at a re-subscription, retried
static int g_cycle;

#define CK(call) do { CUptiResult r_ = (call); if (r_ != CUPTI_SUCCESS) { const char *m_ = ""; \
    cuptiGetResultString(r_, &m_); printf("{\"error\": \"%s: %s\", \"cycle\": %d, \"retries\": %ld}\n", #call, m_, \
    g_cycle, g_retries.load()); fflush(stdout); _exit(1); } } while (0)
// A re-subscription right after a finalize, with other threads in the driver, may
// find CUPTI not initialized yet: retried every ms for up to 2 s.
#define RETRY(call) do { CUptiResult rr_; for (int i_ = 0; (rr_ = (call)) == CUPTI_ERROR_NOT_INITIALIZED && i_ < 2000; i_++) \
    { g_retries++; std::this_thread::sleep_for(std::chrono::milliseconds(1)); } CK(rr_); } while (0)

static void CUPTIAPI requested(uint8_t **buf, size_t *size, size_t *max) {
    *size = 8 << 20; *buf = (uint8_t *)aligned_alloc(8, *size); *max = 0;
}
static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *buf, size_t, size_t valid) {
    CUpti_Activity *rec = nullptr;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS)
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) g_records++;
    free(buf);
}

static void teardown_here() {
    double t0 = now_us();
    cuptiUnsubscribe(g_sub);
    if (strcmp(g_fin, "none")) cuptiFinalize(), g_registered = false;
    g_fin_us = now_us() - t0;
    g_torn = 1;
}

static void CUPTIAPI cb(void *, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void *data) {
    const CUpti_CallbackData *d = (const CUpti_CallbackData *)data;
    if (cbid < CUPTI_DRIVER_TRACE_CBID_SIZE && g_is_launch[cbid]) {
        int w = g_window.load(), m = g_maybe_on.load();
        if (d->callbackSite == CUPTI_API_ENTER) {
            g_callbacks++;
            t_enter_window = w, t_enter_maybe = m;
        } else {
            if (w && t_enter_window) g_sure += g_nodes[cbid];
            if (m || t_enter_maybe) g_maybe += g_nodes[cbid];
        }
    }
    int one = 1;
    if (d->callbackSite == CUPTI_API_EXIT && strcmp(g_fin, "poller") && g_teardown.compare_exchange_strong(one, 0))
        teardown_here();
}

static void subscribe() {
    double t0 = now_us();
    if (!g_registered) RETRY(cuptiActivityRegisterCallbacks(requested, completed));
    g_registered = true;
    RETRY(cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)cb, nullptr));
    CK(cuptiEnableDomain(1, g_sub, CUPTI_CB_DOMAIN_DRIVER_API));
    g_enable_us += now_us() - t0;
}

struct block { double t, ns; int phase; };
static std::vector<block> g_blocks;

static void launcher(int id, long long kernel_ns, const char *resub) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaGraphExec_t exec = nullptr;
    // TC_GRAPHS: launch (default: threads 1 and 2 replay their graph), idle (the
    // graph is instantiated and never launched), destroyed (replayed 10 times, then
    // exec and graph destroyed before the cycles), none.
    const char *mode = getenv("TC_GRAPHS") ? getenv("TC_GRAPHS") : "launch";
    if (strcmp(mode, "none") && (id == 1 || id == 2)) {
        cudaGraph_t g;
        cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        for (int i = 0; i < GRAPH_NODES; i++) spin<<<1, 32, 0, s>>>(0);
        cudaStreamEndCapture(s, &g);
        cudaGraphInstantiate(&exec, g, 0);
        if (!strcmp(mode, "destroyed")) {
            for (int i = 0; i < 10; i++) cudaGraphLaunch(exec, s);
            cudaStreamSynchronize(s);
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(g);
        }
        if (strcmp(mode, "launch")) exec = nullptr;  // eager launches from here on
    }
    while (!g_stop.load()) {
        double t0 = now_us();
        int ph = g_phase.load();
        const int n = 256;
        for (int i = 0; i < n; i++) {
            if (id == 0 && g_resub_req.load() && !strcmp(resub, "app")) {
                subscribe();
                g_resub_req = 0;
            }
            if (exec && id == 1) cudaGraphLaunch(exec, s);
            else if (exec && id == 2) cuGraphLaunch((CUgraphExec)exec, (CUstream)s);
            else spin<<<1, 32, 0, s>>>(kernel_ns);
            if ((i & 63) == 63 && kernel_ns == 0) cudaStreamSynchronize(s);
        }
        cudaStreamSynchronize(s);
        if (id == 0 && g_phase.load() == ph) g_blocks.push_back({t0, (now_us() - t0) * 1e3 / n, ph});
    }
}

static void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds((long)(ms * 1e3))); }

static double median(std::vector<double> v) {
    if (v.empty()) return -1;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: teardown_cycle FIN RESUB THREADS CYCLES [WINDOW_MS GAP_MS KERNEL_US]\n"); return 2; }
    g_fin = argv[1];
    const char *resub = argv[2];
    int threads = atoi(argv[3]), cycles = atoi(argv[4]);
    double window_ms = argc > 5 ? atof(argv[5]) : 50, gap_ms = argc > 6 ? atof(argv[6]) : 100;
    long long kernel_ns = argc > 7 ? (long long)(atof(argv[7]) * 1e3) : 0;
    cudaFree(0);
    for (int i = 0; i < CUPTI_DRIVER_TRACE_CBID_SIZE; i++) {
        const char *name = nullptr;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, i, &name) != CUPTI_SUCCESS || !name) continue;
        g_is_launch[i] = !strncmp(name, "cuLaunch", 8) || !strncmp(name, "cuGraphLaunch", 13);
        g_nodes[i] = !strncmp(name, "cuGraphLaunch", 13) ? GRAPH_NODES : 1;
    }
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; i++) ts.emplace_back(launcher, i, kernel_ns, resub);
    sleep_ms(1500);  // warm-up and "before"
    char rows[65536];
    int off = 0, bad = 0, timeouts = 0, no_callbacks = 0;
    double fin_max = 0, fin_sum = 0, en_max = 0;
    for (int c = 0; c < cycles; c++) {
        g_cycle = c;
        g_callbacks = 0, g_sure = 0, g_maybe = 0, g_records = 0, g_enable_us = 0;
        g_phase = PH_SUB;
        if (!strcmp(resub, "app")) {
            g_resub_req = 1;
            for (int i = 0; i < 2000 && g_resub_req.load(); i++) sleep_ms(1);
            if (g_resub_req.load()) { printf("{\"error\": \"thread 0 did not subscribe\"}\n"); _exit(1); }
        } else {
            subscribe();
        }
        sleep_ms(window_ms / 2);  // callback-only phase
        long cb_only = g_callbacks.load();
        double t0 = now_us();
        g_maybe_on = 1;
        CK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        g_enable_us += now_us() - t0;
        en_max = std::max(en_max, g_enable_us);
        g_window = 1;
        g_phase = PH_WINDOW;
        sleep_ms(window_ms);
        g_window = 0;
        CK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        g_maybe_on = 0;
        CK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
        g_phase = PH_TEARDOWN;
        g_torn = 0;
        if (!strcmp(g_fin, "poller")) {
            teardown_here();
        } else {
            g_teardown = 1;
            for (int i = 0; i < 5000 && !g_torn.load(); i++) sleep_ms(1);
            if (!g_torn.load()) { timeouts++; g_teardown = 0; }
        }
        fin_max = std::max(fin_max, g_fin_us), fin_sum += g_fin_us;
        long sure = g_sure, maybe = g_maybe, rec = g_records, cbs = g_callbacks;
        if (rec < sure || rec > maybe) bad++;
        if (cb_only == 0) no_callbacks++;
        if (c < 40 || rec < sure || rec > maybe || cb_only == 0)
            off += snprintf(rows + off, sizeof rows - off > 0 ? sizeof rows - off : 0, "%s[%ld,%ld,%ld,%ld,%ld]",
                            off ? "," : "", cb_only, cbs, sure, rec, maybe);
        g_phase = PH_GAP;
        sleep_ms(gap_ms);
    }
    g_phase = PH_AFTER;
    sleep_ms(1500);
    g_stop = 1;
    for (auto &t : ts) t.join();
    std::vector<double> by[PH_N];
    for (auto &b : g_blocks) by[b.phase].push_back(b.ns);
    printf("{\"fin\": \"%s\", \"resub\": \"%s\", \"threads\": %d, \"cycles\": %d, \"kernel_us\": %.1f, "
           "\"ns_before\": %.0f, \"ns_window\": %.0f, \"ns_gap\": %.0f, \"ns_after\": %.0f, "
           "\"finalize_ms_mean\": %.2f, \"finalize_ms_max\": %.2f, \"enable_ms_max\": %.2f, "
           "\"teardown_timeouts\": %d, \"not_initialized_retries\": %ld, \"cycles_records_outside_bounds\": %d, \"cycles_without_callbacks\": %d, "
           "\"cycles_cbonly_cbs_sure_records_maybe\": [%s]}\n",
           g_fin, resub, threads, cycles, kernel_ns / 1e3, median(by[PH_BEFORE]), median(by[PH_WINDOW]),
           median(by[PH_GAP]), median(by[PH_AFTER]), fin_sum / cycles / 1e3, fin_max / 1e3, en_max / 1e3,
           timeouts, g_retries.load(), bad, no_callbacks, rows);
    return 0;
}
