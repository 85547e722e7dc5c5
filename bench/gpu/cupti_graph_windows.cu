// Standalone CUPTI check of graph-kernel timestamps under repeated activity
// windows (issue 15). No shim, no agent: CONCURRENT_KERNEL activity is switched on
// and off around cudaGraphLaunch replays of a 12-node chain (alternating ~2 us and
// ~6 us spin kernels), and every record is written raw, so that a rule telling the
// mis-timed records apart can be found and checked offline.
//   nvcc -O2 -o cupti_graph_windows bench/gpu/cupti_graph_windows.cu -lcupti -lcuda
//   cupti_graph_windows OUT.csv            (all scenarios; a summary per scenario)
// CSV columns: scenario, window, corr, graph_id, node_id, stream, long, start, end,
// launch_ts (CUPTI clock at the launch callback's ENTER; 0 without callbacks),
// window_enable_ts, window_disable_ts, launch_window (window of the launch, -1 outside).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_)); exit(1); } } while (0)
#define CU(x) do { CUptiResult r = (x); if (r != CUPTI_SUCCESS) { const char *s = "?"; \
    cuptiGetResultString(r, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1); } } while (0)

__global__ void spin_short(unsigned long long cycles) {
    unsigned long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
__global__ void spin_long(unsigned long long cycles) {
    unsigned long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

struct Rec {
    uint32_t corr, graph_id, stream;
    uint64_t node_id, start, end;
    bool is_long;
};
static std::mutex g_mu;
static std::vector<Rec> g_recs;
static std::map<uint32_t, std::pair<uint64_t, int>> g_launch; // corr -> (ts, window)
static int g_cur_window = -1;

static void CUPTIAPI buf_req(uint8_t **b, size_t *sz, size_t *max) {
    *sz = 8 << 20;
    *b = (uint8_t *)aligned_alloc(8, *sz);
    *max = 0;
}
static void CUPTIAPI buf_done(CUcontext, uint32_t, uint8_t *b, size_t, size_t valid) {
    CUpti_Activity *r = nullptr;
    std::lock_guard<std::mutex> l(g_mu);
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        auto *k = (CUpti_ActivityKernel10 *)r;
        g_recs.push_back({k->correlationId, k->graphId, k->streamId, k->graphNodeId, k->start,
                          k->end, strstr(k->name, "spin_long") != nullptr});
    }
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
    if (dropped) fprintf(stderr, "dropped %zu\n", dropped);
    free(b);
}
static void CUPTIAPI api_cb(void *, CUpti_CallbackDomain dom, CUpti_CallbackId, const void *d) {
    auto *cb = (const CUpti_CallbackData *)d;
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    uint64_t ts = 0;
    cuptiGetTimestamp(&ts);
    std::lock_guard<std::mutex> l(g_mu);
    g_launch[cb->correlationId] = {ts, g_cur_window};
}

static CUpti_SubscriberHandle g_sub;
static void callbacks(bool on) {
    static const CUpti_CallbackId ids[] = {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
                                           CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
                                           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx};
    for (auto id : ids) cuptiEnableCallback(on, g_sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
}

struct Opts {
    const char *name;
    int windows = 10, in = 20, out = 100;
    bool cb = true;            // driver launch callbacks on throughout (as the shim)
    bool drain_before_disable = false;
    bool idle_before_enable = false; // sync before each enable: nothing queued at the edge
    bool two_execs = false;    // two execs of the same graph, alternating
    bool upload = false;       // cudaGraphUpload right after each enable
    bool eager = false;        // the same 12 kernels launched eagerly (control)
    bool eager_first = false;  // one eager kernel first in each window, then the replays
    bool continuous = false;   // activity on throughout (control)
    bool per_window_exec = false; // a fresh exec for every window
    bool flush_after_disable = false; // drain, disable, flush: read out before any later replay
    bool other_between = false; // between windows replay a second exec, not the windowed one
    bool eager_between = false; // between windows launch the kernels eagerly, no replay
};

static unsigned long long g_short_cycles, g_long_cycles;

static void launch_eager(cudaStream_t s) {
    for (int i = 0; i < 12; i++) {
        if (i & 1) spin_long<<<1, 32, 0, s>>>(g_long_cycles);
        else spin_short<<<1, 32, 0, s>>>(g_short_cycles);
    }
}

static cudaGraphExec_t make_exec(cudaStream_t s) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    launch_eager(s);
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    return e;
}

struct WinTs { uint64_t en, dis; };

static void run(const Opts &o, FILE *csv) {
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    callbacks(o.cb);
    cudaGraphExec_t e0 = make_exec(s), e1 = o.two_execs || o.other_between ? make_exec(s) : nullptr;
    auto replay = [&](int i) {
        if (o.eager) launch_eager(s);
        else CK(cudaGraphLaunch(o.two_execs && (i & 1) ? e1 : e0, s));
    };
    for (int i = 0; i < 10; i++) replay(i);
    CK(cudaStreamSynchronize(s));
    {
        std::lock_guard<std::mutex> l(g_mu);
        g_recs.clear();
        g_launch.clear();
    }
    std::vector<WinTs> wts;
    if (o.continuous) CU(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    for (int w = 0; w < o.windows; w++) {
        if (o.idle_before_enable) CK(cudaStreamSynchronize(s));
        if (o.per_window_exec) {
            CK(cudaGraphExecDestroy(e0));
            e0 = make_exec(s);
        }
        WinTs t{};
        if (!o.continuous) CU(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        cuptiGetTimestamp(&t.en);
        { std::lock_guard<std::mutex> l(g_mu); g_cur_window = w; }
        if (o.upload) CK(cudaGraphUpload(e0, s));
        if (o.eager_first) spin_short<<<1, 32, 0, s>>>(g_short_cycles);
        for (int i = 0; i < o.in; i++) replay(i);
        if (o.drain_before_disable) CK(cudaStreamSynchronize(s));
        { std::lock_guard<std::mutex> l(g_mu); g_cur_window = -1; }
        if (!o.continuous) CU(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
        cuptiGetTimestamp(&t.dis);
        wts.push_back(t);
        if (o.flush_after_disable) {
            CK(cudaStreamSynchronize(s));
            CU(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
        }
        for (int i = 0; i < o.out; i++) {
            if (o.other_between) CK(cudaGraphLaunch(e1, s));
            else if (o.eager_between) launch_eager(s);
            else replay(i);
        }
    }
    CK(cudaStreamSynchronize(s));
    if (o.continuous) CU(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CU(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));

    std::lock_guard<std::mutex> l(g_mu);
    std::vector<Rec> recs = g_recs;
    std::sort(recs.begin(), recs.end(), [](const Rec &a, const Rec &b) { return a.end < b.end; });
    // per-kernel medians
    std::vector<uint64_t> ds[2];
    for (auto &r : recs) ds[r.is_long].push_back(r.end - r.start);
    uint64_t med[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        if (!ds[k].empty()) {
            std::nth_element(ds[k].begin(), ds[k].begin() + ds[k].size() / 2, ds[k].end());
            med[k] = ds[k][ds[k].size() / 2];
        }
    // window of each record: by its end (ends are right); rank of its replay in it
    auto window_of = [&](uint64_t t) {
        int w = -1;
        for (size_t i = 0; i < wts.size(); i++) if (wts[i].en <= t) w = (int)i;
        return w;
    };
    // The window a record's launch was made in: from the launch callback, else by its start.
    auto launch_window = [&](const Rec &r) {
        auto li = g_launch.find(r.corr);
        return li != g_launch.end() ? li->second.second : window_of(r.start);
    };
    // (launch window, graph node) -> the newest correlation id: the window's last replay of it
    std::map<std::pair<int, uint64_t>, uint32_t> last_corr;
    for (auto &r : recs) {
        if (!r.node_id) continue;
        auto key = std::make_pair(launch_window(r), r.node_id);
        auto it = last_corr.find(key);
        if (it == last_corr.end() || r.corr > it->second) last_corr[key] = r.corr;
    }
    std::map<uint32_t, uint64_t> prev_end_stream;
    int bad = 0, tp[4] = {0}, fp[4] = {0};
    double sum = 0, sum_good = 0;
    int n_good = 0, before_en = 0;
    uint64_t worst = 0;
    for (auto &r : recs) {
        uint64_t d = r.end - r.start;
        bool is_bad = d > med[r.is_long] * 3 / 2 + 1000;
        int w = window_of(r.end);
        bool rule[4] = {
            w >= 0 && r.start < wts[w].en,                       // starts before its window opened
            r.node_id && last_corr[std::make_pair(launch_window(r), r.node_id)] == r.corr, // the shim's rule
            prev_end_stream.count(r.stream) && r.start + 500 < prev_end_stream[r.stream], // overlaps the previous record
            g_launch.count(r.corr) && r.start < g_launch[r.corr].first, // starts before its launch call
        };
        for (int k = 0; k < 4; k++) {
            if (rule[k] && is_bad) tp[k]++;
            if (rule[k] && !is_bad) fp[k]++;
        }
        if (is_bad) {
            bad++;
            if (d > worst) worst = d;
            if (w >= 0 && r.start < wts[w].en) before_en++;
        } else {
            sum_good += d, n_good++;
        }
        sum += d;
        prev_end_stream[r.stream] = r.end;
        auto li = g_launch.find(r.corr);
        fprintf(csv, "%s,%d,%u,%u,%llu,%u,%d,%llu,%llu,%llu,%llu,%llu,%d\n", o.name, w, r.corr,
                r.graph_id, (unsigned long long)r.node_id, r.stream, (int)r.is_long,
                (unsigned long long)r.start, (unsigned long long)r.end,
                (unsigned long long)(li != g_launch.end() ? li->second.first : 0),
                (unsigned long long)(w >= 0 ? wts[w].en : 0), (unsigned long long)(w >= 0 ? wts[w].dis : 0),
                li != g_launch.end() ? li->second.second : -9);
    }
    size_t n = recs.size();
    printf("%-22s records %5zu (expect %5d)  bad %4d (%4.1f%%, %d start before enable, worst %.1f us)  "
           "mean %.2f us, good-only %.2f us; medians %.2f / %.2f us\n",
           o.name, n, o.windows * o.in * 12, bad, n ? 100.0 * bad / n : 0, before_en, worst / 1e3,
           n ? sum / n / 1e3 : 0, n_good ? sum_good / n_good / 1e3 : 0, med[0] / 1e3, med[1] / 1e3);
    const char *rn[4] = {"start<enable", "last-replay-in-window", "overlaps-prev", "start<launch-call"};
    for (int k = 0; k < 4; k++)
        printf("    rule %-24s catches %4d of %4d bad, flags %5d good\n", rn[k], tp[k], bad, fp[k]);
    fflush(stdout);
    CK(cudaGraphExecDestroy(e0));
    if (e1) CK(cudaGraphExecDestroy(e1));
    CK(cudaStreamDestroy(s));
}

int main(int argc, char **argv) {
    FILE *csv = fopen(argc > 1 ? argv[1] : "cupti_graph_windows.csv", "w");
    if (!csv) { perror("csv"); return 1; }
    fprintf(csv, "scenario,window,corr,graph_id,node_id,stream,long,start,end,launch_ts,"
                 "window_enable_ts,window_disable_ts,launch_window\n");
    CK(cudaSetDevice(0));
    int khz = 0;
    CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    g_short_cycles = (unsigned long long)khz * 2 / 1000;  // ~2 us
    g_long_cycles = (unsigned long long)khz * 6 / 1000;   // ~6 us
    CU(cuptiActivityRegisterCallbacks(buf_req, buf_done));
    CU(cuptiSubscribe(&g_sub, (CUpti_CallbackFunc)api_cb, nullptr));
    std::vector<Opts> all;
    auto add = [&](const char *name) { Opts o; o.name = name; all.push_back(o); return &all.back(); };
    add("issue-pattern");
    add("no-callbacks")->cb = false;
    add("drain-before-disable")->drain_before_disable = true;
    add("idle-before-enable")->idle_before_enable = true;
    add("no-launch-between")->out = 0;
    add("one-replay-per-window")->in = 1;
    add("two-execs")->two_execs = true;
    add("upload-after-enable")->upload = true;
    add("eager-first")->eager_first = true;
    add("fresh-exec-per-window")->per_window_exec = true;
    add("eager-control")->eager = true;
    add("continuous-control")->continuous = true;
    add("out-50")->out = 50;
    add("out-200")->out = 200;
    add("flush-after-disable")->flush_after_disable = true;
    add("other-exec-between")->other_between = true;
    add("eager-between")->eager_between = true;
    add("issue-pattern-again");
    for (auto &o : all) run(o, csv);
    fclose(csv);
    return 0;
}
