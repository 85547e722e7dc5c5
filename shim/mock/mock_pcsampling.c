/*
 * mock_pcsampling.c: the mock libcupti's PC Sampling API (cupti_pcsampling.h), with
 * the rules an H100 showed (CUDA 13; bench/gpu/pc_sampling.cu, docs/benchmarks.md):
 *   - cuptiPCSamplingEnable comes first: the stall-reason queries and
 *     cuptiPCSamplingSetConfigurationAttribute answer CUPTI_ERROR_INVALID_OPERATION
 *     before it, and so does cuptiPCSamplingGetData after cuptiPCSamplingDisable;
 *   - GetData fills the client's buffer with the PCs gathered so far; Disable leaves
 *     the rest in the buffer given as CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
 *   - stall reasons come in pairs, `<reason>` and `<reason>_not_issued`, the second a
 *     subset of the first (totalSamples counts the first of each pair);
 *   - in continuous mode without start/stop control every record carries one
 *     correlation id (0 here);
 *   - cuptiActivityEnable(CONCURRENT_KERNEL) while it is enabled answers
 *     CUPTI_ERROR_NOT_COMPATIBLE (mock_cupti.c), unless that activity was on before.
 * Samples are deterministic: a kernel that runs D ns gives D >> period samples (one
 * cycle per ns), spread over its function's pcs by weight (the module image's
 * `name=ns@0x210:6,0x240:3`; default 0x0), each pc's samples 3/4 mio_throttle (half of
 * them not issued) and the rest selected, largest remainders first.
 * cuptiGetCubinCrc is FNV-1a 64 of the bytes (real CUPTI's CRC is its own); a
 * module's image is its "cubin", announced at load (CUPTI_CBID_RESOURCE_MODULE_LOADED).
 */
#include <cupti.h>
#include <cupti_pcsampling.h>
#include "mock_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct reason { uint32_t index; const char *name; };
/* Indices are not 0..n-1, as a client must not assume. */
static const struct reason REASONS[] = {
    {2, "smsp__pcsamp_warps_issue_stalled_mio_throttle"},
    {3, "smsp__pcsamp_warps_issue_stalled_mio_throttle_not_issued"},
    {7, "smsp__pcsamp_warps_issue_stalled_selected"},
    {9, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"},
    {10, "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"},
};
#define NREASONS (sizeof REASONS / sizeof REASONS[0])
#define MAX_ENTRIES 4096

struct entry { const struct mock_func *f; uint64_t pc; uint64_t n[NREASONS]; };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int enabled, start_stop, started;
static uint32_t period = 8;  /* log2 cycles; CUPTI's default is its own */
static CUpti_PCSamplingData *configured;
static struct entry entries[MAX_ENTRIES];
static size_t nentries;
static uint64_t dropped;

static struct entry *entry_of(const struct mock_func *f, uint64_t pc)
{
    for (size_t i = 0; i < nentries; i++)
        if (entries[i].f == f && entries[i].pc == pc) return &entries[i];
    if (nentries == MAX_ENTRIES) return NULL;
    struct entry *e = &entries[nentries++];
    memset(e, 0, sizeof *e);
    e->f = f;
    e->pc = pc;
    return e;
}

void mock_pc_sample(const struct mock_func *f, uint64_t duration_ns)
{
    pthread_mutex_lock(&mu);
    if (!enabled || (start_stop && !started)) goto out;
    uint64_t total = duration_ns >> period, weights = 0, given = 0;
    for (uint32_t i = 0; i < f->npcs; i++) weights += f->pc_weight[i];
    for (uint32_t i = 0; i < f->npcs && weights; i++) {
        /* floors, then the leftover to the first pcs (the image lists them by weight) */
        uint64_t s = total * f->pc_weight[i] / weights;
        if (i == f->npcs - 1) s = total - given;
        given += s;
        struct entry *e = entry_of(f, f->pc[i]);
        if (!e) { dropped += s; continue; }
        uint64_t mio = s * 3 / 4;
        e->n[0] += mio;
        e->n[1] += mio / 2;
        e->n[2] += s - mio;
    }
out:
    pthread_mutex_unlock(&mu);
}

/* Move up to collectNumPcs entries into out (oldest first); the caller holds mu. */
static void hand_over(CUpti_PCSamplingData *out)
{
    size_t n = nentries < out->collectNumPcs ? nentries : out->collectNumPcs;
    uint64_t samples = 0;
    for (size_t i = 0; i < n; i++) {
        CUpti_PCSamplingPCData *pc = &out->pPcData[i];
        const struct entry *e = &entries[i];
        pc->cubinCrc = mockcuda_module_crc(e->f->mod);
        pc->pcOffset = e->pc;
        pc->functionIndex = 0;
        pc->functionName = e->f->name;
        pc->correlationId = 0;
        size_t k = 0;
        for (size_t r = 0; r < NREASONS; r++) {
            if (!e->n[r]) continue;
            pc->stallReason[k].pcSamplingStallReasonIndex = REASONS[r].index;
            pc->stallReason[k].samples = (uint32_t)e->n[r];
            k++;
            if (!strstr(REASONS[r].name, "_not_issued")) samples += e->n[r];
        }
        pc->stallReasonCount = k;
    }
    memmove(entries, entries + n, (nentries - n) * sizeof *entries);
    nentries -= n;
    out->totalNumPcs = n;
    out->remainingNumPcs = nentries;
    out->totalSamples = samples;
    out->droppedSamples = dropped;
    out->nonUsrKernelsTotalSamples = 0;
    out->hardwareBufferFull = 0;
    dropped = 0;
}

CUptiResult CUPTIAPI cuptiPCSamplingEnable(CUpti_PCSamplingEnableParams *p)
{
    API_GUARD();
    if (!p || !p->ctx) return CUPTI_ERROR_INVALID_PARAMETER;
    mock_ensure_registered();
    pthread_mutex_lock(&mu);
    enabled = 1;
    started = 0;
    mockcuda_gate.pc_sampling = 1;
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingDisable(CUpti_PCSamplingDisableParams *p)
{
    API_GUARD();
    if (!p || !p->ctx) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    if (!enabled) {
        pthread_mutex_unlock(&mu);
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    mockcuda_gate.pc_sampling = 0;
    enabled = 0;
    if (configured) hand_over(configured);
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingGetNumStallReasons(CUpti_PCSamplingGetNumStallReasonsParams *p)
{
    API_GUARD();
    if (!p || !p->numStallReasons) return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enabled) return CUPTI_ERROR_INVALID_OPERATION;
    *p->numStallReasons = NREASONS;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingGetStallReasons(CUpti_PCSamplingGetStallReasonsParams *p)
{
    API_GUARD();
    if (!p || !p->stallReasonIndex || !p->stallReasons) return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enabled) return CUPTI_ERROR_INVALID_OPERATION;
    for (size_t i = 0; i < p->numStallReasons && i < NREASONS; i++) {
        p->stallReasonIndex[i] = REASONS[i].index;
        strncpy(p->stallReasons[i], REASONS[i].name, CUPTI_STALL_REASON_STRING_SIZE - 1);
    }
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingSetConfigurationAttribute(CUpti_PCSamplingConfigurationInfoParams *p)
{
    API_GUARD();
    if (!p || !p->pPCSamplingConfigurationInfo) return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enabled) return CUPTI_ERROR_INVALID_OPERATION;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < p->numAttributes; i++) {
        CUpti_PCSamplingConfigurationInfo *c = &p->pPCSamplingConfigurationInfo[i];
        switch (c->attributeType) {
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD:
            period = c->attributeData.samplingPeriodData.samplingPeriod;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER:
            configured = (CUpti_PCSamplingData *)c->attributeData.samplingDataBufferData.samplingDataBuffer;
            break;
        case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL:
            start_stop = c->attributeData.enableStartStopControlData.enableStartStopControl != 0;
            break;
        default:
            break;  /* collection mode, stall reasons, buffer sizes, format: accepted */
        }
    }
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingGetData(CUpti_PCSamplingGetDataParams *p)
{
    API_GUARD();
    if (!p || !p->pcSamplingData) return CUPTI_ERROR_INVALID_PARAMETER;
    pthread_mutex_lock(&mu);
    if (!enabled) {
        pthread_mutex_unlock(&mu);
        return CUPTI_ERROR_INVALID_OPERATION;
    }
    hand_over((CUpti_PCSamplingData *)p->pcSamplingData);
    pthread_mutex_unlock(&mu);
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingStart(CUpti_PCSamplingStartParams *p)
{
    API_GUARD();
    if (!p) return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enabled || !start_stop) return CUPTI_ERROR_INVALID_OPERATION;
    started = 1;
    return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiPCSamplingStop(CUpti_PCSamplingStopParams *p)
{
    API_GUARD();
    if (!p) return CUPTI_ERROR_INVALID_PARAMETER;
    if (!enabled || !start_stop) return CUPTI_ERROR_INVALID_OPERATION;
    started = 0;
    return CUPTI_SUCCESS;
}

/* For tests: whether samples are being taken now (enabled, and started if start/stop
 * control is on), so that a workload can launch only what will be sampled. */
int mock_cupti_pc_sampling_active(void)
{
    pthread_mutex_lock(&mu);
    int on = enabled && (!start_stop || started);
    pthread_mutex_unlock(&mu);
    return on;
}

CUptiResult CUPTIAPI cuptiGetCubinCrc(CUpti_GetCubinCrcParams *p)
{
    API_GUARD();
    if (!p || !p->cubin) return CUPTI_ERROR_INVALID_PARAMETER;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < p->cubinSize; i++) h = (h ^ ((const uint8_t *)p->cubin)[i]) * 0x100000001b3ull;
    p->cubinCrc = h;
    return CUPTI_SUCCESS;
}
