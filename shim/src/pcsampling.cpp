/* pcsampling.cpp: opt-in PC sampling with stall reasons (GPU_AGENT_PC_SAMPLING=1).
 *
 * CUPTI's PC Sampling API, in continuous mode (kernels stay concurrent) with
 * start/stop control, so that the GPU samples only inside the shim's collection
 * windows: on an H100 a kernel ran 3.7x slower while sampling, whatever the
 * period (docs/benchmarks.md), so sampling follows the duty cycle like kernel
 * activity. A context is enabled and configured on the poller once a launch has
 * noted it (Enable first: the stall-reason queries and the configuration are
 * refused before it, as an H100 showed). Starting, stopping and draining run on
 * the launching thread, in the launch callback (as parcagpu does): on an H100 a
 * process whose poller thread started and stopped sampling while the application
 * waited in cudaDeviceSynchronize hung. The first launch in a window starts
 * sampling, the first after it stops it and drains it. With continuous collection
 * (GPU_AGENT_DUTY_CYCLE=1) a launch drains at most every PCS_DRAIN_NS instead: drains
 * a second apart failed with CUPTI_ERROR_OUT_OF_MEMORY on the H100 (its buffer was full).
 * The drained PCs go to BPF as pc_sample_batch probes; the stall-reason names and
 * the modules' cubins (kept here, read by the agent from /proc/PID/mem) are
 * announced too, and again when an agent asks.
 * In continuous mode every sample of a range carries one correlation id (seen on
 * the H100), so samples join launches by kernel (function name), not by launch. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti_pcsampling.h>

#include "ga_probes.h"
#include "ga_internal.h"

#define PCS_MAX_CTX 16
#define PCS_BUFFER_PCS 2048 /* PCs per GetData call */
#define PCS_MAX_REASONS 256
#define PCS_DRAIN_NS 10000000ull           /* while sampling, a launch drains this often */
#define PCS_SCRATCH_BYTES (16u << 20)      /* CUPTI's staging of decoded PCs (parcagpu's size) */
#define PCS_WORKER_SLEEP_MS 5

static struct {
    CUptiResult (*Enable)(CUpti_PCSamplingEnableParams *);
    CUptiResult (*Disable)(CUpti_PCSamplingDisableParams *);
    CUptiResult (*GetNumStallReasons)(CUpti_PCSamplingGetNumStallReasonsParams *);
    CUptiResult (*GetStallReasons)(CUpti_PCSamplingGetStallReasonsParams *);
    CUptiResult (*SetConfigurationAttribute)(CUpti_PCSamplingConfigurationInfoParams *);
    CUptiResult (*GetData)(CUpti_PCSamplingGetDataParams *);
    CUptiResult (*Start)(CUpti_PCSamplingStartParams *);
    CUptiResult (*Stop)(CUpti_PCSamplingStopParams *);
    CUptiResult (*GetCubinCrc)(CUpti_GetCubinCrcParams *);
    CUptiResult (*GetConfigurationAttribute)(CUpti_PCSamplingConfigurationInfoParams *); /* optional */
} api;

struct pcs_ctx {
    std::atomic<uintptr_t> ctx;     /* noted by a launch (lock-free), then fixed */
    std::atomic<int> state;         /* PCS_NOTED, PCS_READY (set up), PCS_FAILED */
    std::atomic<int> busy;          /* try-lock: starting, stopping, draining */
    bool started;
    uint64_t last_drain_ns;
    CUpti_PCSamplingData cupti_buf; /* the configured buffer: CUPTI's own */
    CUpti_PCSamplingData out;       /* what GetData fills */
    ga_pc_record batch[GA_PC_BATCH_MAX];
    uint32_t batch_n;
    uint64_t pending_drops;
};
enum { PCS_NOTED = 0, PCS_READY = 1, PCS_FAILED = 2 };

std::atomic<int> ga_pcs_on;          /* sampling wanted and possible: launches come here */
static pcs_ctx ctxs[PCS_MAX_CTX];
static bool loaded, load_failed;
static size_t n_reasons;
static uint32_t reason_index[PCS_MAX_REASONS];
static char reason_name[PCS_MAX_REASONS][CUPTI_STALL_REASON_STRING_SIZE];
static bool reasons_known;

static std::atomic<uint64_t> st_samples, st_records, st_dropped, st_get_data_errors;

bool ga_pcs_wanted(void) noexcept { return ga_cfg.pc_sampling != 0; }

static bool load_api(void) {
    if (loaded || load_failed) return loaded;
    void *h = ga_cupti_handle;
#define PCS_SYM(field, sym) *(void **)&api.field = h ? dlsym(h, #sym) : nullptr
    PCS_SYM(Enable, cuptiPCSamplingEnable);
    PCS_SYM(Disable, cuptiPCSamplingDisable);
    PCS_SYM(GetNumStallReasons, cuptiPCSamplingGetNumStallReasons);
    PCS_SYM(GetStallReasons, cuptiPCSamplingGetStallReasons);
    PCS_SYM(SetConfigurationAttribute, cuptiPCSamplingSetConfigurationAttribute);
    PCS_SYM(GetData, cuptiPCSamplingGetData);
    PCS_SYM(Start, cuptiPCSamplingStart);
    PCS_SYM(Stop, cuptiPCSamplingStop);
    PCS_SYM(GetCubinCrc, cuptiGetCubinCrc);
    PCS_SYM(GetConfigurationAttribute, cuptiPCSamplingGetConfigurationAttribute);
#undef PCS_SYM
    loaded = api.Enable && api.Disable && api.GetNumStallReasons && api.GetStallReasons &&
             api.SetConfigurationAttribute && api.GetData && api.Start && api.Stop && api.GetCubinCrc;
    if (!loaded) {
        load_failed = true;
        ga_log("GPU_AGENT_PC_SAMPLING: this CUPTI has no PC Sampling API; PC sampling off");
    }
    return loaded;
}

/* At attach: PC sampling wanted, and the API there. */
void ga_pcs_attach(void) noexcept {
    ga_pcs_on.store(ga_pcs_wanted() && load_api() ? 1 : 0, std::memory_order_release);
}

static bool alloc_buffer(CUpti_PCSamplingData *b) {
    memset(b, 0, sizeof(*b));
    b->size = sizeof(CUpti_PCSamplingData);
    b->collectNumPcs = PCS_BUFFER_PCS;
    b->pPcData = (CUpti_PCSamplingPCData *)calloc(PCS_BUFFER_PCS, sizeof(CUpti_PCSamplingPCData));
    if (!b->pPcData) return false;
    for (size_t i = 0; i < PCS_BUFFER_PCS; i++) {
        b->pPcData[i].size = sizeof(CUpti_PCSamplingPCData);
        b->pPcData[i].stallReason =
            (CUpti_PCSamplingStallReason *)calloc(n_reasons, sizeof(CUpti_PCSamplingStallReason));
        if (!b->pPcData[i].stallReason) return false; /* the context fails; leaked once */
    }
    return true;
}

static void announce_reasons(void) {
    for (size_t i = 0; i < n_reasons; i++) ga_fire_pc_stall_reason(reason_index[i], reason_name[i]);
}

/* Enable, read the stall reasons, configure; on the poller. */
static bool set_up(pcs_ctx *p) {
    CUcontext ctx = (CUcontext)p->ctx.load(std::memory_order_relaxed);
    CUpti_PCSamplingEnableParams ep = {CUpti_PCSamplingEnableParamsSize, nullptr, ctx};
    CUptiResult r = api.Enable(&ep);
    const char *what = "cuptiPCSamplingEnable";
    if (r == CUPTI_SUCCESS && !reasons_known) {
        size_t n = 0;
        CUpti_PCSamplingGetNumStallReasonsParams np = {CUpti_PCSamplingGetNumStallReasonsParamsSize,
                                                        nullptr, ctx, &n};
        what = "cuptiPCSamplingGetNumStallReasons";
        r = api.GetNumStallReasons(&np);
        if (r == CUPTI_SUCCESS) {
            n_reasons = n < PCS_MAX_REASONS ? n : PCS_MAX_REASONS;
            char *names[PCS_MAX_REASONS];
            for (size_t i = 0; i < n_reasons; i++) names[i] = reason_name[i];
            CUpti_PCSamplingGetStallReasonsParams rp = {CUpti_PCSamplingGetStallReasonsParamsSize,
                                                         nullptr, ctx, n_reasons, reason_index, names};
            what = "cuptiPCSamplingGetStallReasons";
            r = api.GetStallReasons(&rp);
            if (r == CUPTI_SUCCESS) {
                reasons_known = true;
                announce_reasons();
            }
        }
    }
    if (r == CUPTI_SUCCESS && !p->out.pPcData && (!alloc_buffer(&p->cupti_buf) || !alloc_buffer(&p->out))) {
        ga_log("PC sampling: no memory for its buffers; off in this context");
        return false;
    }
    if (r == CUPTI_SUCCESS) {
        CUpti_PCSamplingConfigurationInfo cfg[7];
        memset(cfg, 0, sizeof(cfg));
        unsigned n = 0;
        cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
        cfg[n++].attributeData.collectionModeData.collectionMode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
        cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
        cfg[n++].attributeData.enableStartStopControlData.enableStartStopControl = 1;
        cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
        cfg[n].attributeData.stallReasonData.stallReasonCount = n_reasons;
        cfg[n++].attributeData.stallReasonData.pStallReasonIndex = reason_index;
        cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
        cfg[n++].attributeData.samplingDataBufferData.samplingDataBuffer = &p->cupti_buf;
        cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE;
        cfg[n++].attributeData.scratchBufferSizeData.scratchBufferSize = PCS_SCRATCH_BYTES;
        /* CUPTI's decoding threads wake every 100 ms by default: the hardware buffer
         * filled before that on an H100 (GetData: OUT_OF_MEMORY) */
        cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN;
        cfg[n++].attributeData.workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan = PCS_WORKER_SLEEP_MS;
        if (ga_cfg.pc_period) { /* 0: CUPTI's default (parcagpu saw set periods break sampling on Blackwell) */
            cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
            cfg[n++].attributeData.samplingPeriodData.samplingPeriod = ga_cfg.pc_period;
        }
        CUpti_PCSamplingConfigurationInfoParams cp = {CUpti_PCSamplingConfigurationInfoParamsSize,
                                                       nullptr, ctx, n, cfg};
        what = "cuptiPCSamplingSetConfigurationAttribute";
        r = api.SetConfigurationAttribute(&cp);
    }
    if (r != CUPTI_SUCCESS) {
        /* Not being allowed to profile (ERR_NVGPUCTRPERM) lands here. */
        ga_log("PC sampling off in a context: %s failed: %s (%d)", what, ga_cupti_err(r), (int)r);
        return false;
    }
    CUpti_PCSamplingConfigurationInfo q[2];
    memset(q, 0, sizeof(q));
    q[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    q[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
    CUpti_PCSamplingConfigurationInfoParams qp = {CUpti_PCSamplingConfigurationInfoParamsSize, nullptr, ctx, 2, q};
    if (api.GetConfigurationAttribute && api.GetConfigurationAttribute(&qp) == CUPTI_SUCCESS)
        ga_debug("PC sampling set up in context %p (%zu stall reasons, period 2^%u cycles, hardware "
                 "buffer %zu MiB)", (void *)ctx, n_reasons, q[0].attributeData.samplingPeriodData.samplingPeriod,
                 q[1].attributeData.hardwareBufferSizeData.hardwareBufferSize >> 20);
    else
        ga_debug("PC sampling set up in context %p (%zu stall reasons)", (void *)ctx, n_reasons);
    return true;
}

static void flush_batch(pcs_ctx *p) {
    if (!p->batch_n && !p->pending_drops) return;
    uint32_t drops = p->pending_drops > UINT32_MAX ? UINT32_MAX : (uint32_t)p->pending_drops;
    ga_fire_pc_sample_batch(p->batch, p->batch_n, drops);
    p->pending_drops = 0;
    p->batch_n = 0;
}

static void take(pcs_ctx *p, const CUpti_PCSamplingData *b) {
    p->pending_drops += b->droppedSamples;
    st_dropped.fetch_add(b->droppedSamples, std::memory_order_relaxed);
    for (size_t i = 0; i < b->totalNumPcs; i++) {
        const CUpti_PCSamplingPCData *pc = &b->pPcData[i];
        uint64_t kernel_id = pc->functionName ? ga_kernel_id_for(pc->functionName) : 0;
        for (size_t r = 0; r < pc->stallReasonCount; r++) {
            uint32_t n = pc->stallReason[r].samples;
            if (!n) continue;
            ga_pc_record *rec = &p->batch[p->batch_n++];
            rec->cubin_crc = pc->cubinCrc;
            rec->pc_offset = pc->pcOffset;
            rec->kernel_id = kernel_id;
            rec->stall_reason = pc->stallReason[r].pcSamplingStallReasonIndex;
            rec->samples = n;
            st_samples.fetch_add(n, std::memory_order_relaxed);
            st_records.fetch_add(1, std::memory_order_relaxed);
            if (p->batch_n == GA_PC_BATCH_MAX) flush_batch(p);
        }
    }
}

/* Everything CUPTI has for p, until it says there is no more; p is locked. */
static void drain(pcs_ctx *p) {
    CUcontext ctx = (CUcontext)p->ctx.load(std::memory_order_relaxed);
    for (int guard = 0; guard < 4096; guard++) {
        CUpti_PCSamplingGetDataParams gp = {CUpti_PCSamplingGetDataParamsSize, nullptr, ctx, &p->out};
        CUptiResult r = api.GetData(&gp);
        if (r != CUPTI_SUCCESS) {
            /* OUT_OF_MEMORY: CUPTI's staging filled before this drain; those samples are lost */
            st_get_data_errors.fetch_add(1, std::memory_order_relaxed);
            ga_debug("cuptiPCSamplingGetData: %s (%d)", ga_cupti_err(r), (int)r);
            break;
        }
        take(p, &p->out);
        if (p->out.totalNumPcs == 0 && p->out.remainingNumPcs == 0) break;
    }
    flush_batch(p);
    p->last_drain_ns = ga_now_ns();
}

static bool lock(pcs_ctx *p) {
    int z = 0;
    return p->busy.compare_exchange_strong(z, 1, std::memory_order_acq_rel);
}
static void unlock(pcs_ctx *p) { p->busy.store(0, std::memory_order_release); }

/* What starting, stopping (with its drain) cost the launching thread, in ns. */
static std::atomic<uint64_t> st_start_ns, st_starts, st_start_max, st_stop_ns, st_stops, st_stop_max;

static void note_time(std::atomic<uint64_t> &sum, std::atomic<uint64_t> &n, std::atomic<uint64_t> &max,
                      uint64_t dt) {
    sum.fetch_add(dt, std::memory_order_relaxed);
    n.fetch_add(1, std::memory_order_relaxed);
    if (dt > max.load(std::memory_order_relaxed)) max.store(dt, std::memory_order_relaxed);
}

static void set_started(pcs_ctx *p, bool on) {
    CUcontext ctx = (CUcontext)p->ctx.load(std::memory_order_relaxed);
    CUptiResult r;
    uint64_t t0 = ga_now_ns();
    if (on) {
        CUpti_PCSamplingStartParams sp = {CUpti_PCSamplingStartParamsSize, nullptr, ctx};
        r = api.Start(&sp);
        p->started = r == CUPTI_SUCCESS;
        p->last_drain_ns = ga_now_ns();
    } else {
        CUpti_PCSamplingStopParams sp = {CUpti_PCSamplingStopParamsSize, nullptr, ctx};
        r = api.Stop(&sp);
        p->started = false;
        drain(p); /* CUPTI asks for a drain after every range */
    }
    if (on) note_time(st_start_ns, st_starts, st_start_max, ga_now_ns() - t0);
    else note_time(st_stop_ns, st_stops, st_stop_max, ga_now_ns() - t0);
    if (r != CUPTI_SUCCESS)
        ga_debug("cuptiPCSampling%s: %s (%d)", on ? "Start" : "Stop", ga_cupti_err(r), (int)r);
}

/* A launch (its callback, on the launching thread): note a new context; in a
 * ready one, start sampling in a window, stop it after, drain while it runs. */
/* collection.cpp, as the n-th window opens: one in GPU_AGENT_PC_SAMPLING_EVERY samples. */
static std::atomic<bool> g_sampled_window{true};
void ga_pcs_window_opened(uint64_t n) noexcept {
    g_sampled_window.store(ga_cfg.pc_every <= 1 || n % ga_cfg.pc_every == 1, std::memory_order_relaxed);
}

void ga_pcs_launch(CUcontext c, bool window_on) noexcept {
    window_on = window_on && g_sampled_window.load(std::memory_order_relaxed);
    uintptr_t v = (uintptr_t)c;
    pcs_ctx *p = nullptr;
    for (unsigned i = 0; v && i < PCS_MAX_CTX && !p; i++) {
        uintptr_t cur = ctxs[i].ctx.load(std::memory_order_acquire);
        if (cur == 0 && ctxs[i].ctx.compare_exchange_strong(cur, v, std::memory_order_acq_rel)) return;
        if (cur == v) p = &ctxs[i];
    }
    if (!p || p->state.load(std::memory_order_acquire) != PCS_READY) return;
    /* In windows a drain at each stop is enough (a 20 ms window's samples fit); a
     * window that never closes (GPU_AGENT_DUTY_CYCLE=1) is drained as it runs. */
    if (window_on == p->started &&
        !(p->started && ga_cfg.duty_cycle == 1 && ga_now_ns() - p->last_drain_ns >= PCS_DRAIN_NS))
        return;
    if (!lock(p)) return;
    if (window_on != p->started) set_started(p, window_on);
    else if (p->started) drain(p);
    unlock(p);
}

/* Poller: set up the contexts launches noted. */
void ga_pcs_poll(void) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    for (unsigned i = 0; i < PCS_MAX_CTX; i++) {
        pcs_ctx *p = &ctxs[i];
        if (!p->ctx.load(std::memory_order_acquire)) break;
        if (p->state.load(std::memory_order_relaxed) != PCS_NOTED) continue;
        p->state.store(set_up(p) ? PCS_READY : PCS_FAILED, std::memory_order_release);
    }
}

/* Detach and exit: no launch callback will stop sampling any more. At a detach
 * sampling is also disabled, and set up again after the next attach has turned
 * kernel activity on: CUPTI refuses activity while PC sampling is enabled. */
void ga_pcs_stop_all(bool disable) noexcept {
    for (unsigned i = 0; i < PCS_MAX_CTX; i++) {
        pcs_ctx *p = &ctxs[i];
        bool got = lock(p);
        for (int spin = 0; spin < 1000 && !got; spin++) { /* a launch drains it now */
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, nullptr);
            got = lock(p);
        }
        if (!got) continue;
        if (p->started) set_started(p, false);
        if (disable && p->state.load(std::memory_order_relaxed) == PCS_READY) {
            CUpti_PCSamplingDisableParams dp = {CUpti_PCSamplingDisableParamsSize, nullptr,
                                                (CUcontext)p->ctx.load(std::memory_order_relaxed)};
            if (api.Disable(&dp) == CUPTI_SUCCESS) take(p, &p->cupti_buf); /* Disable leaves the rest there */
            flush_batch(p);
            p->state.store(PCS_NOTED, std::memory_order_release);
        }
        unlock(p);
    }
}

/* CUPTI_CBID_RESOURCE_MODULE_LOADED (a CUDA thread, while attached): keep a copy
 * of the cubin, announce it by CRC (pcs_cubins.cpp). */
void ga_pcs_module_loaded(const void *cbdata) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    const CUpti_ResourceData *rd = (const CUpti_ResourceData *)cbdata;
    const CUpti_ModuleResourceData *md =
        rd ? (const CUpti_ModuleResourceData *)rd->resourceDescriptor : nullptr;
    if (!md || !md->pCubin || !md->cubinSize) return;
    CUpti_GetCubinCrcParams cp = {CUpti_GetCubinCrcParamsSize, md->cubinSize, md->pCubin, 0};
    if (api.GetCubinCrc(&cp) != CUPTI_SUCCESS) return;
    ga_pcs_keep_cubin(cp.cubinCrc, md->pCubin, md->cubinSize);
}

/* An agent attached or asked: the stall reasons and cubins again. */
void ga_pcs_replay(void) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    if (reasons_known) announce_reasons();
    ga_pcs_replay_cubins();
}

/* The debug exit lines: what was sampled and lost, and what starting and stopping cost. */
void ga_pcs_log_exit(void) noexcept {
    ga_debug("PC sampling (pid %d): %llu samples in %llu records, %llu lost by CUPTI, %llu "
             "GetData failures, %llu cubins kept, %llu not; %llu kernel records outside windows",
             (int)getpid(), (unsigned long long)st_samples.load(), (unsigned long long)st_records.load(),
             (unsigned long long)st_dropped.load(), (unsigned long long)st_get_data_errors.load(),
             (unsigned long long)ga_pcs_stat(GA_SC_CUBINS), (unsigned long long)ga_pcs_stat(GA_SC_CUBINS_DROPPED),
             (unsigned long long)ga_activity_stat(GA_SC_OUTSIDE_WINDOWS));
    uint64_t ns = st_starts.load(), ms = st_stops.load();
    ga_debug("PC sampling (pid %d): start mean %.1f max %.1f us (%llu), stop and drain mean %.1f max %.1f us (%llu)",
             (int)getpid(), ns ? (double)st_start_ns.load() / (double)ns / 1e3 : 0.0, (double)st_start_max.load() / 1e3,
             (unsigned long long)ns, ms ? (double)st_stop_ns.load() / (double)ms / 1e3 : 0.0,
             (double)st_stop_max.load() / 1e3, (unsigned long long)ms);
}

uint64_t ga_pcs_stat(int which) noexcept {
    switch (which) {
    case GA_SC_PC_SAMPLES: return st_samples.load();
    case GA_SC_PC_RECORDS: return st_records.load();
    case GA_SC_PC_DROPPED: return st_dropped.load();
    case GA_SC_CUBINS: case GA_SC_CUBINS_DROPPED: return ga_pcs_cubin_stat(which);
    case GA_SC_PC_GET_DATA_ERRORS: return st_get_data_errors.load();
    }
    return 0;
}
