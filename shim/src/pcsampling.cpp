/* pcsampling.cpp: opt-in PC sampling with stall reasons (GPU_AGENT_PC_SAMPLING=1).
 *
 * CUPTI's PC Sampling API, in continuous mode (kernels stay concurrent) with
 * start/stop control, so that the GPU samples only inside the shim's collection
 * windows: on an H100 a kernel ran 3.7x slower while sampling, whatever the
 * period (docs/benchmarks.md), so sampling follows the duty cycle like kernel
 * activity. Launch callbacks note each context they see (ga_pcs_note_context,
 * lock-free); everything else runs on the poller: a context is enabled and
 * configured once (Enable first: the stall-reason queries and the configuration
 * are refused before it, as an H100 showed), started when a window opens,
 * stopped and drained when it closes (CUPTI asks for a drain after every range's
 * end). The drained PCs go to BPF as pc_sample_batch probes; the stall-reason
 * names and the modules' cubins (kept here, read by the agent from
 * /proc/PID/mem) are announced too, and again when an agent asks.
 * In continuous mode every sample of a range carries one correlation id (seen on
 * the H100), so samples join launches by kernel (function name), not by launch.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cupti_pcsampling.h>

#include "ga_probes.h"
#include "ga_internal.h"

#define PCS_MAX_CTX 16
#define PCS_BUFFER_PCS 2048 /* PCs per GetData call */
#define PCS_MAX_REASONS 256
#define PCS_MAX_CUBINS 4096

static struct {
    CUptiResult (*Enable)(CUpti_PCSamplingEnableParams *);
    CUptiResult (*GetNumStallReasons)(CUpti_PCSamplingGetNumStallReasonsParams *);
    CUptiResult (*GetStallReasons)(CUpti_PCSamplingGetStallReasonsParams *);
    CUptiResult (*SetConfigurationAttribute)(CUpti_PCSamplingConfigurationInfoParams *);
    CUptiResult (*GetData)(CUpti_PCSamplingGetDataParams *);
    CUptiResult (*Start)(CUpti_PCSamplingStartParams *);
    CUptiResult (*Stop)(CUpti_PCSamplingStopParams *);
    CUptiResult (*GetCubinCrc)(CUpti_GetCubinCrcParams *);
} api;

struct pcs_ctx {
    CUcontext ctx;
    bool ready, failed, started;
    CUpti_PCSamplingData cupti_buf; /* the configured buffer: CUPTI's own */
    CUpti_PCSamplingData out;       /* what GetData fills */
};

std::atomic<int> ga_pcs_on;          /* sampling wanted and possible: launches note contexts */
static std::atomic<uintptr_t> noted[PCS_MAX_CTX];
static pcs_ctx ctxs[PCS_MAX_CTX];    /* poller thread only */
static bool loaded, load_failed;
static size_t n_reasons;
static uint32_t reason_index[PCS_MAX_REASONS];
static char reason_name[PCS_MAX_REASONS][CUPTI_STALL_REASON_STRING_SIZE];
static bool reasons_known;

struct cubin { uint64_t crc; void *copy; uint64_t size; };
static pthread_mutex_t cubin_mu = PTHREAD_MUTEX_INITIALIZER;
static cubin cubins[PCS_MAX_CUBINS];
static size_t n_cubins, cubin_bytes;

static ga_pc_record batch[GA_PC_BATCH_MAX];
static uint32_t batch_n;
static uint64_t pending_drops;
static std::atomic<uint64_t> st_samples, st_records, st_dropped, st_cubins, st_cubins_dropped;

bool ga_pcs_wanted(void) noexcept { return ga_cfg.pc_sampling != 0; }

void ga_pcs_note_context(CUcontext c) noexcept {
    uintptr_t v = (uintptr_t)c;
    if (!v) return;
    for (unsigned i = 0; i < PCS_MAX_CTX; i++) {
        uintptr_t cur = noted[i].load(std::memory_order_relaxed);
        if (cur == v) return;
        if (cur == 0 && noted[i].compare_exchange_strong(cur, v, std::memory_order_acq_rel)) return;
        if (cur == v) return;
    }
}

static bool load_api(void) {
    if (loaded || load_failed) return loaded;
    void *h = ga_cupti_handle;
#define PCS_SYM(field, sym) *(void **)&api.field = h ? dlsym(h, #sym) : nullptr
    PCS_SYM(Enable, cuptiPCSamplingEnable);
    PCS_SYM(GetNumStallReasons, cuptiPCSamplingGetNumStallReasons);
    PCS_SYM(GetStallReasons, cuptiPCSamplingGetStallReasons);
    PCS_SYM(SetConfigurationAttribute, cuptiPCSamplingSetConfigurationAttribute);
    PCS_SYM(GetData, cuptiPCSamplingGetData);
    PCS_SYM(Start, cuptiPCSamplingStart);
    PCS_SYM(Stop, cuptiPCSamplingStop);
    PCS_SYM(GetCubinCrc, cuptiGetCubinCrc);
#undef PCS_SYM
    loaded = api.Enable && api.GetNumStallReasons && api.GetStallReasons &&
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
    CUpti_PCSamplingEnableParams ep = {CUpti_PCSamplingEnableParamsSize, nullptr, p->ctx};
    CUptiResult r = api.Enable(&ep);
    const char *what = "cuptiPCSamplingEnable";
    if (r == CUPTI_SUCCESS && !reasons_known) {
        size_t n = 0;
        CUpti_PCSamplingGetNumStallReasonsParams np = {CUpti_PCSamplingGetNumStallReasonsParamsSize,
                                                        nullptr, p->ctx, &n};
        what = "cuptiPCSamplingGetNumStallReasons";
        r = api.GetNumStallReasons(&np);
        if (r == CUPTI_SUCCESS) {
            n_reasons = n < PCS_MAX_REASONS ? n : PCS_MAX_REASONS;
            char *names[PCS_MAX_REASONS];
            for (size_t i = 0; i < n_reasons; i++) names[i] = reason_name[i];
            CUpti_PCSamplingGetStallReasonsParams rp = {CUpti_PCSamplingGetStallReasonsParamsSize,
                                                         nullptr, p->ctx, n_reasons, reason_index, names};
            what = "cuptiPCSamplingGetStallReasons";
            r = api.GetStallReasons(&rp);
            if (r == CUPTI_SUCCESS) {
                reasons_known = true;
                announce_reasons();
            }
        }
    }
    if (r == CUPTI_SUCCESS && (!alloc_buffer(&p->cupti_buf) || !alloc_buffer(&p->out))) {
        ga_log("PC sampling: no memory for its buffers; off in this context");
        return false;
    }
    if (r == CUPTI_SUCCESS) {
        CUpti_PCSamplingConfigurationInfo cfg[5];
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
        if (ga_cfg.pc_period) { /* else CUPTI's default: set periods broke sampling on some GPUs (parcagpu) */
            cfg[n].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
            cfg[n++].attributeData.samplingPeriodData.samplingPeriod = ga_cfg.pc_period;
        }
        CUpti_PCSamplingConfigurationInfoParams cp = {CUpti_PCSamplingConfigurationInfoParamsSize,
                                                       nullptr, p->ctx, n, cfg};
        what = "cuptiPCSamplingSetConfigurationAttribute";
        r = api.SetConfigurationAttribute(&cp);
    }
    if (r != CUPTI_SUCCESS) {
        /* Not being allowed to profile (ERR_NVGPUCTRPERM) lands here. */
        ga_log("PC sampling off in a context: %s failed: %s (%d)", what, ga_cupti_err(r), (int)r);
        return false;
    }
    ga_debug("PC sampling set up in context %p (%zu stall reasons, period %s)", (void *)p->ctx,
             n_reasons, ga_cfg.pc_period ? "set" : "CUPTI's default");
    return true;
}

static void flush_batch(void) {
    if (!batch_n && !pending_drops) return;
    uint32_t drops = pending_drops > UINT32_MAX ? UINT32_MAX : (uint32_t)pending_drops;
    ga_fire_pc_sample_batch(batch, batch_n, drops);
    pending_drops = 0;
    batch_n = 0;
}

static void take(const CUpti_PCSamplingData *b) {
    pending_drops += b->droppedSamples;
    st_dropped.fetch_add(b->droppedSamples, std::memory_order_relaxed);
    for (size_t i = 0; i < b->totalNumPcs; i++) {
        const CUpti_PCSamplingPCData *pc = &b->pPcData[i];
        uint64_t kernel_id = pc->functionName ? ga_kernel_id_for(pc->functionName) : 0;
        for (size_t r = 0; r < pc->stallReasonCount; r++) {
            uint32_t n = pc->stallReason[r].samples;
            if (!n) continue;
            ga_pc_record *rec = &batch[batch_n++];
            rec->cubin_crc = pc->cubinCrc;
            rec->pc_offset = pc->pcOffset;
            rec->kernel_id = kernel_id;
            rec->stall_reason = pc->stallReason[r].pcSamplingStallReasonIndex;
            rec->samples = n;
            st_samples.fetch_add(n, std::memory_order_relaxed);
            st_records.fetch_add(1, std::memory_order_relaxed);
            if (batch_n == GA_PC_BATCH_MAX) flush_batch();
        }
    }
}

/* Everything CUPTI has for p, until it says there is no more. */
static void drain(pcs_ctx *p) {
    for (int guard = 0; guard < 4096; guard++) {
        CUpti_PCSamplingGetDataParams gp = {CUpti_PCSamplingGetDataParamsSize, nullptr, p->ctx, &p->out};
        CUptiResult r = api.GetData(&gp);
        if (r != CUPTI_SUCCESS) {
            ga_debug("cuptiPCSamplingGetData: %s (%d)", ga_cupti_err(r), (int)r);
            break;
        }
        take(&p->out);
        if (p->out.totalNumPcs == 0 && p->out.remainingNumPcs == 0) break;
    }
    flush_batch();
}

/* Poller: set up contexts that launched since the last poll; in an open window
 * they start at once. */
void ga_pcs_poll(bool window_on) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    for (unsigned i = 0; i < PCS_MAX_CTX; i++) {
        CUcontext c = (CUcontext)noted[i].load(std::memory_order_acquire);
        if (!c) break;
        pcs_ctx *p = &ctxs[i];
        if (p->ctx == c) continue;
        p->ctx = c;
        p->ready = set_up(p);
        p->failed = !p->ready;
        if (p->ready && window_on) {
            CUpti_PCSamplingStartParams sp = {CUpti_PCSamplingStartParamsSize, nullptr, c};
            p->started = api.Start(&sp) == CUPTI_SUCCESS;
        }
    }
}

/* A window opened (on) or closed: start sampling, or stop and drain it. */
void ga_pcs_window(bool on) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    for (unsigned i = 0; i < PCS_MAX_CTX; i++) {
        pcs_ctx *p = &ctxs[i];
        if (!p->ready) continue;
        if (on && !p->started) {
            CUpti_PCSamplingStartParams sp = {CUpti_PCSamplingStartParamsSize, nullptr, p->ctx};
            CUptiResult r = api.Start(&sp);
            p->started = r == CUPTI_SUCCESS;
            if (!p->started) ga_debug("cuptiPCSamplingStart: %s (%d)", ga_cupti_err(r), (int)r);
        } else if (!on && p->started) {
            CUpti_PCSamplingStopParams sp = {CUpti_PCSamplingStopParamsSize, nullptr, p->ctx};
            CUptiResult r = api.Stop(&sp);
            if (r != CUPTI_SUCCESS) ga_debug("cuptiPCSamplingStop: %s (%d)", ga_cupti_err(r), (int)r);
            p->started = false;
            drain(p);
        }
    }
}

/* The periodic flush: what sampling that is still on gathered (a window that
 * stays open, GPU_AGENT_DUTY_CYCLE=1, is never closed and drained). */
void ga_pcs_flush(void) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    for (unsigned i = 0; i < PCS_MAX_CTX; i++)
        if (ctxs[i].started) drain(&ctxs[i]);
}

/* CUPTI_CBID_RESOURCE_MODULE_LOADED (a CUDA thread, while attached): keep a copy
 * of the cubin, announce it by CRC. */
void ga_pcs_module_loaded(const void *cbdata) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    const CUpti_ResourceData *rd = (const CUpti_ResourceData *)cbdata;
    const CUpti_ModuleResourceData *md =
        rd ? (const CUpti_ModuleResourceData *)rd->resourceDescriptor : nullptr;
    if (!md || !md->pCubin || !md->cubinSize) return;
    CUpti_GetCubinCrcParams cp = {CUpti_GetCubinCrcParamsSize, md->cubinSize, md->pCubin, 0};
    if (api.GetCubinCrc(&cp) != CUPTI_SUCCESS) return;
    pthread_mutex_lock(&cubin_mu);
    bool known = false;
    for (size_t i = 0; i < n_cubins && !known; i++) known = cubins[i].crc == cp.cubinCrc;
    uint64_t cap = (uint64_t)ga_cfg.pc_cubin_mb << 20;
    void *copy = nullptr;
    if (!known && n_cubins < PCS_MAX_CUBINS && cubin_bytes + md->cubinSize <= cap &&
        (copy = malloc(md->cubinSize))) {
        memcpy(copy, md->pCubin, md->cubinSize);
        cubins[n_cubins++] = {cp.cubinCrc, copy, md->cubinSize};
        cubin_bytes += md->cubinSize;
        st_cubins.fetch_add(1, std::memory_order_relaxed);
        ga_fire_cubin_loaded(cp.cubinCrc, copy, md->cubinSize);
    } else if (!known) {
        st_cubins_dropped.fetch_add(1, std::memory_order_relaxed); /* its samples lack lines */
    }
    pthread_mutex_unlock(&cubin_mu);
}

/* An agent attached or asked: the stall reasons and cubins again. */
void ga_pcs_replay(void) noexcept {
    if (!ga_pcs_on.load(std::memory_order_relaxed)) return;
    if (reasons_known) announce_reasons();
    pthread_mutex_lock(&cubin_mu);
    for (size_t i = 0; i < n_cubins; i++) ga_fire_cubin_loaded(cubins[i].crc, cubins[i].copy, cubins[i].size);
    pthread_mutex_unlock(&cubin_mu);
}

uint64_t ga_pcs_stat(int which) noexcept {
    switch (which) {
    case GA_SC_PC_SAMPLES: return st_samples.load();
    case GA_SC_PC_RECORDS: return st_records.load();
    case GA_SC_PC_DROPPED: return st_dropped.load();
    case GA_SC_CUBINS: return st_cubins.load();
    case GA_SC_CUBINS_DROPPED: return st_cubins_dropped.load();
    }
    return 0;
}
