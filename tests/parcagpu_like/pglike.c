/*
 * pglike.c: a CUPTI injection library that fires parcagpu-shaped probes, written
 * from parcagpu's contract alone (its src/probes.d, provider "parcagpu"), for the
 * tests of gpu-agent's second source (agent/gpu_agent/probes/parcagpu.py).
 *
 * Like parcagpu: at a launch's API exit (a runtime launch, or a driver launch not
 * under a runtime one), while the cuda_correlation semaphore is up and a per-thread
 * token bucket allows (PGLIKE_RATE launches per second, 0: every launch), it fires
 * cuda_correlation(correlationId, signedCbid, name) (negative cbid: driver API);
 * and for each kernel record of CUPTI's concurrent-kernel activity it fires
 * kernel_executed(start, end, correlationId, deviceId, streamId, graphId,
 * graphNodeId, name): only for the correlations it fired (parcagpu's filter), or,
 * with PGLIKE_ALL_RECORDS=1, for every record. Every probe has a semaphore, as
 * dtrace -G gives them; only cuda_correlation's gates the work.
 *
 * With PGLIKE_PC=1 it also samples PCs as parcagpu does (PARCAGPU_PC_SAMPLING_RATE)
 * through CUPTI's PC Sampling API, in continuous mode: enabled in a context at its
 * first launch (period PGLIKE_PC_PERIOD), drained every PGLIKE_PC_DRAIN launches and
 * at exit, each drain fired as pc_sample_batch(pointers to CUpti_PCSamplingPCData,
 * count <= 128); the stall reasons as stall_reason_map(64-byte slots indexed by
 * reason, count) and each module's cubin (a copy) as cubin_loaded(crc, cubin, size),
 * both while their semaphores are up and again when they rise (an agent joined).
 *
 * Its file name says nothing of parcagpu: the agent must find it by its probes.
 * PGLIKE_BAD=1: after each buffer, also one record that ends before it starts and
 * one without a name (what a broken or hostile library could fire); with PGLIKE_PC,
 * at exit, a pc_sample_batch of 129 records and one whose record pointer is NULL,
 * and the same error probe twice.
 * PGLIKE_COLD_NAMES=1: kernel_executed hands each name over from a page of its own,
 * file-backed and never touched by this process (a library's string table not yet
 * read looks like this): BPF cannot read it, the agent must.
 * PGLIKE_FLUSH_MS=M: the activity flush period (default 100; 0: none, so kernel
 * records come when a buffer fills or at exit, after the PC drains of their launches).
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <cupti.h>
#include <cupti_pcsampling.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

__extension__ unsigned short parcagpu_cuda_correlation_semaphore
    __attribute__((unused, section(".probes"))); /* exported: the tests' workload waits on it */
__extension__ unsigned short parcagpu_kernel_executed_semaphore
    __attribute__((unused, section(".probes"), visibility("hidden")));
__extension__ unsigned short parcagpu_pc_sample_batch_semaphore
    __attribute__((unused, section(".probes"), visibility("hidden")));
__extension__ unsigned short parcagpu_stall_reason_map_semaphore
    __attribute__((unused, section(".probes"), visibility("hidden")));
__extension__ unsigned short parcagpu_cubin_loaded_semaphore
    __attribute__((unused, section(".probes"), visibility("hidden")));
__extension__ unsigned short parcagpu_error_semaphore
    __attribute__((unused, section(".probes"), visibility("hidden")));

#define FILTER_SIZE 65536u /* correlation ids fired, not yet matched (open addressing) */
static uint32_t g_filter[FILTER_SIZE];
static pthread_mutex_t g_filter_mu = PTHREAD_MUTEX_INITIALIZER;
static double g_rate;
static int g_all_records, g_bad;
static __thread double t_tokens = -1, t_last;
static __thread uint32_t t_runtime_corr; /* the runtime launch this thread is inside */
static __thread uint32_t t_chosen_corr;  /* the launch whose exit fires cuda_correlation */

#define TOMBSTONE 0xffffffffu

static void filter_insert(uint32_t corr)
{
    pthread_mutex_lock(&g_filter_mu);
    for (uint32_t i = 0, j = corr * 2654435761u; i < FILTER_SIZE; i++, j++) {
        uint32_t *s = &g_filter[j % FILTER_SIZE];
        if (*s == 0 || *s == TOMBSTONE || *s == corr) {
            *s = corr;
            break;
        }
    }
    pthread_mutex_unlock(&g_filter_mu);
}

/* Whether corr was fired; an eager kernel's entry goes (one record per launch), a
 * graph kernel's stays (the kernels of one graph launch share its id). */
static int filter_take(uint32_t corr, int keep)
{
    int found = 0;
    pthread_mutex_lock(&g_filter_mu);
    for (uint32_t i = 0, j = corr * 2654435761u; i < FILTER_SIZE; i++, j++) {
        uint32_t *s = &g_filter[j % FILTER_SIZE];
        if (*s == 0)
            break;
        if (*s == corr) {
            found = 1;
            if (!keep)
                *s = TOMBSTONE;
            break;
        }
    }
    pthread_mutex_unlock(&g_filter_mu);
    return found;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int take_token(void)
{
    if (g_rate <= 0)
        return 1;
    double t = now_s();
    if (t_tokens < 0) {
        t_tokens = 1;
        t_last = t;
    }
    t_tokens += (t - t_last) * g_rate;
    if (t_tokens > g_rate)
        t_tokens = g_rate;
    t_last = t;
    if (t_tokens < 1)
        return 0;
    t_tokens -= 1;
    return 1;
}

static int is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
        return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
               cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000;
    return cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
           cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch;
}

/* ---- PC sampling (PGLIKE_PC=1), one context ---- */
#define PC_RECORDS 4096
#define PC_BATCH 128
#define SLOT 64
static int g_pc, g_pc_drain = 64;
static uint32_t g_pc_period = 8;
static pthread_mutex_t g_pc_mu = PTHREAD_MUTEX_INITIALIZER;
static CUcontext g_pc_ctx;
static CUpti_PCSamplingData g_pc_out, g_pc_cfg; /* GetData's buffer; the one Disable fills */
static char *g_slots;
static uint32_t g_nslots;
static long g_launches;
static unsigned short g_stall_sem_seen, g_cubin_sem_seen;
struct cubin { uint64_t crc; char *data; uint64_t size; };
static struct cubin g_cubins[64];
static int g_ncubins;

/* One call site per probe, through noinline functions, as parcagpu does: their
 * arguments sit in registers, not in globals (a %rip-relative symbol BPF cannot read). */
__attribute__((noinline)) static void fire_pc_sample_batch(const void **records, uint32_t count)
{
    STAP_PROBE2(parcagpu, pc_sample_batch, records, count);
}

__attribute__((noinline)) static void fire_stall_reason_map(const char *names, uint32_t count)
{
    STAP_PROBE2(parcagpu, stall_reason_map, names, count);
}

__attribute__((noinline)) static void fire_cubin_loaded(uint64_t crc, const char *cubin, uint64_t size)
{
    STAP_PROBE3(parcagpu, cubin_loaded, crc, cubin, size);
}

__attribute__((noinline)) static void fire_error(int32_t code, const char *message, const char *component)
{
    STAP_PROBE3(parcagpu, error, code, message, component);
}

static void fire_batches(CUpti_PCSamplingData *d)
{
    const void *ptrs[PC_BATCH];
    uint32_t n = 0;
    for (size_t i = 0; i < d->totalNumPcs; i++) {
        ptrs[n++] = &d->pPcData[i];
        if (n == PC_BATCH || i + 1 == d->totalNumPcs) {
            fire_pc_sample_batch(ptrs, n);
            n = 0;
        }
    }
    d->totalNumPcs = 0;
}

/* parcagpu's emitMetadata: the names and cubins while their semaphores are up, all
 * again when one rose; g_pc_mu held. */
static void emit_metadata(void)
{
    unsigned short s = parcagpu_stall_reason_map_semaphore, c = parcagpu_cubin_loaded_semaphore;
    if (g_slots && s && s > g_stall_sem_seen)
        fire_stall_reason_map(g_slots, g_nslots);
    if (c && c > g_cubin_sem_seen)
        for (int i = 0; i < g_ncubins; i++)
            fire_cubin_loaded(g_cubins[i].crc, g_cubins[i].data, g_cubins[i].size);
    g_stall_sem_seen = s;
    g_cubin_sem_seen = c;
}

static void alloc_pc_buffer(CUpti_PCSamplingData *d, size_t nreasons)
{
    d->size = sizeof *d;
    d->collectNumPcs = PC_RECORDS;
    d->pPcData = calloc(PC_RECORDS, sizeof *d->pPcData);
    for (size_t i = 0; i < PC_RECORDS; i++) {
        d->pPcData[i].size = sizeof d->pPcData[i];
        d->pPcData[i].stallReason = calloc(nreasons, sizeof *d->pPcData[i].stallReason);
    }
}

static void pc_enable(CUcontext ctx)
{
    CUpti_PCSamplingEnableParams ep = {CUpti_PCSamplingEnableParamsSize, NULL, ctx};
    if (cuptiPCSamplingEnable(&ep) != CUPTI_SUCCESS) {
        fprintf(stderr, "pglike: cuptiPCSamplingEnable failed\n");
        return;
    }
    size_t n = 0;
    CUpti_PCSamplingGetNumStallReasonsParams np = {CUpti_PCSamplingGetNumStallReasonsParamsSize, NULL, ctx, &n};
    cuptiPCSamplingGetNumStallReasons(&np);
    uint32_t *index = calloc(n, sizeof *index);
    char **names = calloc(n, sizeof *names);
    for (size_t i = 0; i < n; i++)
        names[i] = calloc(1, CUPTI_STALL_REASON_STRING_SIZE);
    CUpti_PCSamplingGetStallReasonsParams rp = {CUpti_PCSamplingGetStallReasonsParamsSize, NULL, ctx, n, index, names};
    cuptiPCSamplingGetStallReasons(&rp);
    uint32_t max = 0;
    for (size_t i = 0; i < n; i++)
        max = index[i] > max ? index[i] : max;
    g_nslots = max + 1;
    g_slots = calloc(g_nslots, SLOT);
    for (size_t i = 0; i < n; i++)
        strncpy(g_slots + index[i] * SLOT, names[i], SLOT - 1);
    alloc_pc_buffer(&g_pc_out, n);
    alloc_pc_buffer(&g_pc_cfg, n);
    CUpti_PCSamplingConfigurationInfo c[4];
    memset(c, 0, sizeof c);
    c[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    c[0].attributeData.collectionModeData.collectionMode = CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    c[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    c[1].attributeData.samplingPeriodData.samplingPeriod = g_pc_period;
    c[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    c[2].attributeData.stallReasonData.stallReasonCount = n;
    c[2].attributeData.stallReasonData.pStallReasonIndex = index;
    c[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    c[3].attributeData.samplingDataBufferData.samplingDataBuffer = &g_pc_cfg;
    CUpti_PCSamplingConfigurationInfoParams cp = {CUpti_PCSamplingConfigurationInfoParamsSize, NULL, ctx, 4, c};
    cuptiPCSamplingSetConfigurationAttribute(&cp);
    g_pc_ctx = ctx;
    emit_metadata();
}

/* Everything CUPTI has now; g_pc_mu held. */
static void pc_drain(void)
{
    for (;;) {
        CUpti_PCSamplingGetDataParams gp = {CUpti_PCSamplingGetDataParamsSize, NULL, g_pc_ctx, &g_pc_out};
        if (cuptiPCSamplingGetData(&gp) != CUPTI_SUCCESS)
            break;
        size_t more = g_pc_out.remainingNumPcs, got = g_pc_out.totalNumPcs;
        fire_batches(&g_pc_out);
        if (!got && !more)
            break;
    }
}

static void pc_after_launch(CUcontext ctx)
{
    pthread_mutex_lock(&g_pc_mu);
    if (!g_pc_ctx && ctx)
        pc_enable(ctx);
    else if (g_pc_ctx && ++g_launches % g_pc_drain == 0) {
        emit_metadata();
        pc_drain();
    }
    pthread_mutex_unlock(&g_pc_mu);
}

static void pc_module_loaded(const CUpti_ResourceData *rd)
{
    const CUpti_ModuleResourceData *md = (const CUpti_ModuleResourceData *)rd->resourceDescriptor;
    pthread_mutex_lock(&g_pc_mu);
    if (md && md->pCubin && md->cubinSize && g_ncubins < 64) {
        struct cubin *c = &g_cubins[g_ncubins++];
        c->size = md->cubinSize;
        c->data = malloc(c->size);
        memcpy(c->data, md->pCubin, c->size);
        CUpti_GetCubinCrcParams cp = {CUpti_GetCubinCrcParamsSize, c->size, c->data, 0};
        cuptiGetCubinCrc(&cp);
        c->crc = cp.cubinCrc;
        if (parcagpu_cubin_loaded_semaphore)
            fire_cubin_loaded(c->crc, c->data, c->size);
    }
    pthread_mutex_unlock(&g_pc_mu);
}

static void pc_at_exit(void)
{
    pthread_mutex_lock(&g_pc_mu);
    if (g_pc_ctx) {
        pc_drain();
        CUpti_PCSamplingDisableParams dp = {CUpti_PCSamplingDisableParamsSize, NULL, g_pc_ctx};
        if (cuptiPCSamplingDisable(&dp) == CUPTI_SUCCESS)
            fire_batches(&g_pc_cfg); /* Disable leaves the rest there */
        g_pc_ctx = NULL;
        if (g_bad) { /* a batch longer than parcagpu's, and a NULL record */
            const void *ptrs[PC_BATCH + 1] = {0};
            fire_pc_sample_batch(ptrs, PC_BATCH + 1);
            fire_pc_sample_batch(ptrs, 1);
            for (int i = 0; i < 2; i++) /* twice: the agent logs one */
                fire_error(35, "cuptiPCSamplingGetData: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", "pc_sampling");
        }
    }
    pthread_mutex_unlock(&g_pc_mu);
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *data)
{
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
        if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED)
            pc_module_loaded((const CUpti_ResourceData *)data);
        return;
    }
    const CUpti_CallbackData *cb = (const CUpti_CallbackData *)data;
    if (!is_launch(domain, cbid))
        return;
    if (g_pc && cb->callbackSite == CUPTI_API_EXIT && domain == CUPTI_CB_DOMAIN_DRIVER_API)
        pc_after_launch(cb->context);
    /* A driver launch under a runtime launch shares its correlation id: the
     * runtime launch fires it. The launch is chosen, and its id put in the filter,
     * at API enter: the mock completes a kernel's record inside the launch, and a
     * periodic flush may hand it over before the exit callback runs. */
    uint32_t corr = cb->correlationId;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (domain == CUPTI_CB_DOMAIN_DRIVER_API && corr == t_runtime_corr)
            return;
        if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
            t_runtime_corr = corr;
        if (parcagpu_cuda_correlation_semaphore && take_token()) {
            t_chosen_corr = corr;
            filter_insert(corr);
        }
        return;
    }
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API && corr == t_runtime_corr)
        return; /* the runtime launch's exit fires it */
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
        t_runtime_corr = 0;
    if (t_chosen_corr != corr || !corr)
        return;
    t_chosen_corr = 0;
    int signed_cbid = domain == CUPTI_CB_DOMAIN_DRIVER_API ? -(int)cbid : (int)cbid;
    const char *name = cb->symbolName ? cb->symbolName : cb->functionName;
    STAP_PROBE3(parcagpu, cuda_correlation, corr, signed_cbid, name);
}

#define COLD_MAX 32
static int g_cold_names, g_cold_n, g_cold_fd = -1;
static struct { char *orig; const char *cold; } g_cold[COLD_MAX];
static pthread_mutex_t g_cold_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *cold_name(const char *name)
{
    if (!g_cold_names || !name)
        return name;
    const char *out = name;
    pthread_mutex_lock(&g_cold_lock);
    for (int i = 0; i < g_cold_n; i++)
        if (strcmp(g_cold[i].orig, name) == 0) {
            out = g_cold[i].cold;
            goto done;
        }
    if (g_cold_fd < 0) {
        char path[] = "/tmp/pglike-cold-XXXXXX";
        g_cold_fd = mkstemp(path);
        unlink(path);
    }
    size_t len = strlen(name) + 1;
    off_t off = (off_t)g_cold_n * 4096;
    if (g_cold_fd >= 0 && g_cold_n < COLD_MAX && len <= 4096 && pwrite(g_cold_fd, name, len, off) == (ssize_t)len) {
        void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, g_cold_fd, off); /* never touched here */
        if (p != MAP_FAILED) {
            g_cold[g_cold_n].orig = strdup(name);
            out = g_cold[g_cold_n++].cold = p;
        }
    }
done:
    pthread_mutex_unlock(&g_cold_lock);
    return out;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *size = 1 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel9 *k = (const CUpti_ActivityKernel9 *)rec;
        if (!filter_take(k->correlationId, k->graphId != 0) && !g_all_records)
            continue;
        uint64_t start = k->start, end = k->end, node = k->graphNodeId;
        uint32_t corr = k->correlationId, dev = k->deviceId, strm = k->streamId, graph = k->graphId;
        const char *name = cold_name(k->name);
        STAP_PROBE8(parcagpu, kernel_executed, start, end, corr, dev, strm, graph, node, name);
        if (g_bad) {
            uint64_t later = end + 1000;
            const char *none = NULL;
            STAP_PROBE8(parcagpu, kernel_executed, later, start, corr, dev, strm, graph, node, name);
            STAP_PROBE8(parcagpu, kernel_executed, start, end, corr, dev, strm, graph, node, none);
        }
    }
    free(buffer);
}

static void flush_at_exit(void)
{
    if (g_pc)
        pc_at_exit();
    cuptiActivityFlushAll(1);
}

int InitializeInjection(void)
{
    const char *r = getenv("PGLIKE_RATE");
    g_rate = r ? atof(r) : 100;
    g_all_records = getenv("PGLIKE_ALL_RECORDS") && atoi(getenv("PGLIKE_ALL_RECORDS"));
    g_bad = getenv("PGLIKE_BAD") && atoi(getenv("PGLIKE_BAD"));
    g_pc = getenv("PGLIKE_PC") && atoi(getenv("PGLIKE_PC"));
    g_cold_names = getenv("PGLIKE_COLD_NAMES") && atoi(getenv("PGLIKE_COLD_NAMES"));
    if (getenv("PGLIKE_PC_PERIOD"))
        g_pc_period = (uint32_t)atoi(getenv("PGLIKE_PC_PERIOD"));
    if (getenv("PGLIKE_PC_DRAIN") && atoi(getenv("PGLIKE_PC_DRAIN")) > 0)
        g_pc_drain = atoi(getenv("PGLIKE_PC_DRAIN"));
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, NULL) != CUPTI_SUCCESS) {
        fprintf(stderr, "pglike: cuptiSubscribe failed\n");
        return 0;
    }
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
    if (g_pc)
        cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    /* PGLIKE_FLUSH_MS=0: no periodic flush (CUPTI's default): records come when a
     * buffer fills and at exit */
    const char *fl = getenv("PGLIKE_FLUSH_MS");
    if (!fl || atoi(fl) > 0)
        cuptiActivityFlushPeriod(fl ? (uint32_t)atoi(fl) : 100);
    atexit(flush_at_exit);
    return 1;
}
