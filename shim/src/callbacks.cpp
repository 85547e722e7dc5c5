/* callbacks.cpp: the CUPTI launch callback and per-thread launch sampling (the
 * unwinding is in unwind.cpp). Everything here runs on the application's
 * launching thread, inside the CUDA API call: no locks, no allocation, no
 * CUDA calls, and CUPTI calls only through teardown.cpp's gate (the driver
 * domain's API exits are where CUPTI is torn down). */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>


#include "ga_probes.h"
#include "ga_internal.h" /* cupti.h: generated_cuda{,_runtime_api}_meta.h */
#include "api_exit.h"
#include "launch_cbids.h"

std::atomic<uint64_t> ga_stat_samples;
std::atomic<uint64_t> ga_stat_forced;
std::atomic<uint64_t> ga_stat_launches;
std::atomic<int> ga_cuda_live;

/* cudaLaunchCooperativeKernelMultiDevice was removed from the CUDA 13
 * headers (its params struct lives in generated_cudart_removed_meta.h, which
 * includes a header that is not shipped). Mirror the layout here: only the
 * first member of struct cudaLaunchParams (func) is read. */
struct ga_cudaLaunchParams {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    void **args;
    size_t sharedMem;
    cudaStream_t stream;
};
struct ga_cudaLaunchCooperativeKernelMultiDevice_params {
    struct ga_cudaLaunchParams *launchParamsList;
    unsigned int numDevices;
    unsigned int flags;
};

/* ---- (domain, cbid) -> launch kind, rebuilt at each attach ---- */
#define GA_CBID_TAB 1024
static uint8_t kind_tab[2][GA_CBID_TAB]; /* 0: not ours, else kind + 1 */
static std::atomic<uint32_t> attach_epoch{1};

void ga_build_kind_table(void) noexcept {
    memset(kind_tab, 0, sizeof(kind_tab));
    for (unsigned i = 0; i < ga_launch_cbid_count; i++) {
        const ga_launch_cbid *e = &ga_launch_cbids[i];
        if (ga_launch_cbid_omitted(e) || e->cbid >= GA_CBID_TAB) continue;
        int d = e->domain == CUPTI_CB_DOMAIN_DRIVER_API ? 0 : 1;
        kind_tab[d][e->cbid] = (uint8_t)(e->kind + 1);
    }
    uint32_t ep = attach_epoch.load(std::memory_order_relaxed) + 1;
    if (ep == 0) ep = 1;
    attach_epoch.store(ep, std::memory_order_release);
}

/* ---- lock-free set of "seen" functions and graph execs ---- */
#define SEEN_CAP (1u << 15)
#define SEEN_MAX_FILL (SEEN_CAP / 4 * 3)
#define SEEN_MAX_PROBE 64
static std::atomic<uintptr_t> seen[SEEN_CAP];
static std::atomic<uint32_t> seen_fill;

/* A new window: a runtime launch whose exit callback was lost when the last
 * window closed must not make this thread skip its next driver launch. */
void ga_sampler_new_window(void) noexcept {
    uint32_t ep = attach_epoch.load(std::memory_order_relaxed) + 1;
    attach_epoch.store(ep ? ep : 1, std::memory_order_release);
}

void ga_sampler_reset_seen(void) noexcept {
    for (unsigned i = 0; i < SEEN_CAP; i++) seen[i].store(0, std::memory_order_relaxed);
    seen_fill.store(0, std::memory_order_release);
}

/* true if key was not in the set and has now been added (first launch). */
static bool seen_first(uintptr_t key) {
    if (!key) return false;
    uint32_t i = (uint32_t)ga_fmix64(key) & (SEEN_CAP - 1);
    for (unsigned p = 0; p < SEEN_MAX_PROBE; p++, i = (i + 1) & (SEEN_CAP - 1)) {
        uintptr_t cur = seen[i].load(std::memory_order_acquire);
        if (cur == key) return false;
        if (cur != 0) continue;
        if (seen_fill.load(std::memory_order_relaxed) >= SEEN_MAX_FILL) return false; /* full */
        if (seen[i].compare_exchange_strong(cur, key, std::memory_order_acq_rel)) {
            seen_fill.fetch_add(1, std::memory_order_relaxed);
            return true;
        }
        if (cur == key) return false; /* another thread inserted it just now */
    }
    return false;
}

/* ---- per-thread sampling state ---- */
struct tls_state {
    uint64_t rng;
    int64_t countdown;
    int64_t graph_countdown;
    uint32_t rt_epoch; /* != 0: inside a runtime launch of this attach epoch */
    uint32_t inited;
    uint32_t busy_round; /* noted as a launching thread in this round (busy.cpp) */
};
static __thread tls_state t_state;

static inline uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Launches until the next sample: geometric with mean `period`. */
static int64_t draw_countdown(uint64_t *rng, uint32_t period) {
    if (period <= 1) return 1;
    double u = (double)((xorshift(rng) >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0,1] */
    double k = floor(log(u) / log1p(-1.0 / (double)period)) + 1.0;
    if (!(k >= 1.0)) return 1;
    if (k > 1e12) return (int64_t)1e12;
    return (int64_t)k;
}

static void tls_init(tls_state *t) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t seed = ga_fmix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
                          (uint64_t)(uintptr_t)t ^ ((uint64_t)syscall(SYS_gettid) << 17));
    t->rng = seed ? seed : 0x9e3779b97f4a7c15ULL;
    t->countdown = draw_countdown(&t->rng, ga_cfg.sample_period);
    t->graph_countdown = draw_countdown(&t->rng, ga_cfg.graph_sample_period);
    t->inited = 1;
}

/* The CUfunction / host function / graph exec a launch refers to. */
static uintptr_t launch_key(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *p) {
    if (!p) return 0;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
        switch (cbid) {
        case CUPTI_DRIVER_TRACE_CBID_cuLaunch:
            return (uintptr_t)((const cuLaunch_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid:
            return (uintptr_t)((const cuLaunchGrid_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync:
            return (uintptr_t)((const cuLaunchGridAsync_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
            return (uintptr_t)((const cuLaunchKernel_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
            return (uintptr_t)((const cuLaunchKernel_ptsz_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
            return (uintptr_t)((const cuLaunchKernelEx_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
            return (uintptr_t)((const cuLaunchKernelEx_ptsz_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
            return (uintptr_t)((const cuLaunchCooperativeKernel_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
            return (uintptr_t)((const cuLaunchCooperativeKernel_ptsz_params *)p)->f;
        case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice: {
            const cuLaunchCooperativeKernelMultiDevice_params *m =
                (const cuLaunchCooperativeKernelMultiDevice_params *)p;
            if (!m->launchParamsList || m->numDevices == 0) return 0;
            return (uintptr_t)m->launchParamsList[0].function;
        }
        case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
            return (uintptr_t)((const cuGraphLaunch_params *)p)->hGraph;
        case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
            return (uintptr_t)((const cuGraphLaunch_ptsz_params *)p)->hGraphExec;
        }
    } else {
        switch (cbid) {
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
            return (uintptr_t)((const cudaLaunchKernel_v7000_params *)p)->func;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
            return (uintptr_t)((const cudaLaunchKernel_ptsz_v7000_params *)p)->func;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
            return (uintptr_t)((const cudaLaunchKernelExC_v11060_params *)p)->func;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
            return (uintptr_t)((const cudaLaunchKernelExC_ptsz_v11060_params *)p)->func;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
            return (uintptr_t)((const cudaLaunchCooperativeKernel_v9000_params *)p)->func;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
            return (uintptr_t)((const cudaLaunchCooperativeKernel_ptsz_v9000_params *)p)->func;
        case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000: {
            const ga_cudaLaunchCooperativeKernelMultiDevice_params *m =
                (const ga_cudaLaunchCooperativeKernelMultiDevice_params *)p;
            if (!m->launchParamsList || m->numDevices == 0) return 0;
            return (uintptr_t)m->launchParamsList[0].func;
        }
        case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
            return (uintptr_t)((const cudaGraphLaunch_v10000_params *)p)->graphExec;
        case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
            return (uintptr_t)((const cudaGraphLaunch_ptsz_v10000_params *)p)->graphExec;
        }
    }
    return 0;
}

/* noinline: one cuda_correlation probe site, and the 512-byte frame buffer
 * is only on the stack for sampled launches. launch_ns: CUPTI's clock at the
 * launch (API enter), the clock of kernel records' start: BPF turns it into
 * launch-to-start latency. 0 if this CUPTI lacks cuptiGetTimestamp. */
/* Time the samples took (the unwind, the probe and the agent's BPF behind it):
 * a window's tail measures the callbacks' cost without it (tail.cpp). */
std::atomic<uint64_t> ga_sample_ns;

__attribute__((noinline)) static void take_sample(uint32_t corr, uint32_t cbid, uint32_t weight) {
    uint64_t t0 = ga_now_ns();
    uint64_t launch_ns = ga_cupti_timestamp();
    uint64_t frames[GA_MAX_FRAMES];
    uint64_t stack_id = 0;
    uint32_t n = ga_unwind(frames, &stack_id);
    ga_fire_cuda_correlation(corr, cbid, stack_id, frames, n, weight, launch_ns);
    ga_stat_samples.fetch_add(1, std::memory_order_relaxed);
    ga_sample_ns.fetch_add(ga_now_ns() - t0, std::memory_order_relaxed);
}

void CUPTIAPI ga_api_callback(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                              const void *cbdata) noexcept {
    if (GA_UNLIKELY(!cbdata || cbid >= GA_CBID_TAB)) return;
    int d;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) d = 0;
    else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) d = 1;
    else {
        if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
        if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) ga_pcs_module_loaded(cbdata);
        else ga_graph_callback(cbid, cbdata);
        return;
    }
    unsigned kind1 = kind_tab[d][cbid];
    if (!kind1) return;
    const CUpti_CallbackData *cd = (const CUpti_CallbackData *)cbdata;
    tls_state *t = &t_state;
    uint32_t epoch = attach_epoch.load(std::memory_order_relaxed);

    if (d == 1) {
        if (cd->callbackSite != CUPTI_API_ENTER) {
            t->rt_epoch = 0;
            return;
        }
        t->rt_epoch = epoch;
    } else {
        if (cd->callbackSite != CUPTI_API_ENTER) {
            ga_teardown_at_api_exit(); /* where CUPTI asks for its teardown (teardown.cpp) */
            return;
        }
        if (t->rt_epoch == epoch) return; /* counted at the runtime launch above us */
    }

    if (GA_UNLIKELY(!ga_cuda_live.load(std::memory_order_relaxed)))
        ga_cuda_live.store(1, std::memory_order_relaxed);
    /* Every launch is counted: the windows' weights are ratios of these counts
     * (window.cpp). Outside a collection window nothing else happens. */
    ga_launch_seq.fetch_add(1, std::memory_order_relaxed);
    /* Opt-in PC sampling starts, stops and drains at launches (pcsampling.cpp). */
    if (GA_UNLIKELY(ga_pcs_on.load(std::memory_order_relaxed)) && ga_cupti_gate_enter()) {
        ga_pcs_launch(cd->context, ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN);
        ga_cupti_gate_leave();
    }
    bool graph = (kind1 - 1) == GA_LK_GRAPH;
    /* A graph launch under CUPTI, in a count phase too: no teardown from now on
     * (CUPTI does not start again after one, collection.cpp) */
    if (GA_UNLIKELY(graph)) ga_graphs_made.store(1, std::memory_order_relaxed);
    int win = ga_window_on.load(std::memory_order_relaxed);
    if (win != GA_WIN_OPEN) {
        if (GA_UNLIKELY(win == GA_WIN_EDGE) && ga_cfg.duty_cycle > 1) ga_window_note_outside(cd->correlationId);
        return;
    }
    if (GA_UNLIKELY(ga_audit_on())) ga_audit_mark(cd->correlationId);
    ga_stat_launches.fetch_add(1, std::memory_order_relaxed);
    if (ga_cfg.duty_cycle > 1) ga_window_note_launch(cd->correlationId);
    if (GA_UNLIKELY(!t->inited)) tls_init(t);
    /* its CPU time is the busy clock (busy.cpp); in windows only, where t is at hand */
    if (GA_UNLIKELY(t->busy_round != ga_busy_gen.load(std::memory_order_relaxed))) ga_busy_note(&t->busy_round);

    uint32_t weight = 0;
    if (seen_first(launch_key(domain, cbid, cd->functionParams))) {
        weight = 1;
        ga_stat_forced.fetch_add(1, std::memory_order_relaxed);
    } else if (graph) {
        if (--t->graph_countdown <= 0) {
            weight = ga_cfg.graph_sample_period;
            t->graph_countdown = draw_countdown(&t->rng, ga_cfg.graph_sample_period);
        }
    } else if (--t->countdown <= 0) {
        weight = ga_cfg.sample_period;
        t->countdown = draw_countdown(&t->rng, ga_cfg.sample_period);
    }
    if (weight) take_sample(cd->correlationId, (uint32_t)cbid, weight);
}
