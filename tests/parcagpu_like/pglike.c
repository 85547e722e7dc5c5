/*
 * pglike.c: a CUPTI injection library that fires parcagpu-shaped probes, written
 * from parcagpu's contract alone (its src/probes.d, provider "parcagpu"), for the
 * tests of gpu-agent's second source (agent/gpu_agent/parcagpu.py).
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
 * Its file name says nothing of parcagpu: the agent must find it by its probes.
 * PGLIKE_BAD=1: after each buffer, also one record that ends before it starts and
 * one without a name (what a broken or hostile library could fire).
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include <cupti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__extension__ unsigned short parcagpu_cuda_correlation_semaphore
    __attribute__((unused, section(".probes"))); /* exported: the tests' workload waits on it */
__extension__ unsigned short parcagpu_kernel_executed_semaphore
    __attribute__((unused, section(".probes"), visibility("hidden")));

#define FILTER_SIZE 65536u /* correlation ids fired, not yet matched (open addressing) */
static uint32_t g_filter[FILTER_SIZE];
static pthread_mutex_t g_filter_mu = PTHREAD_MUTEX_INITIALIZER;
static double g_rate;
static int g_all_records, g_bad;
static __thread double t_tokens = -1, t_last;
static __thread uint32_t t_runtime_corr; /* the runtime launch this thread is inside */

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

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *data)
{
    const CUpti_CallbackData *cb = (const CUpti_CallbackData *)data;
    if (!is_launch(domain, cbid))
        return;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cb->callbackSite == CUPTI_API_ENTER) {
        t_runtime_corr = cb->correlationId;
        return;
    }
    if (cb->callbackSite != CUPTI_API_EXIT || !parcagpu_cuda_correlation_semaphore)
        return;
    int signed_cbid;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
        if (cb->correlationId == t_runtime_corr)
            return; /* the runtime launch's exit fires it */
        signed_cbid = -(int)cbid;
    } else {
        t_runtime_corr = 0;
        signed_cbid = (int)cbid;
    }
    if (!take_token())
        return;
    const char *name = cb->symbolName ? cb->symbolName : cb->functionName;
    STAP_PROBE3(parcagpu, cuda_correlation, cb->correlationId, signed_cbid, name);
    filter_insert(cb->correlationId);
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
        const char *name = k->name;
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
    cuptiActivityFlushAll(1);
}

int InitializeInjection(void)
{
    const char *r = getenv("PGLIKE_RATE");
    g_rate = r ? atof(r) : 100;
    g_all_records = getenv("PGLIKE_ALL_RECORDS") && atoi(getenv("PGLIKE_ALL_RECORDS"));
    g_bad = getenv("PGLIKE_BAD") && atoi(getenv("PGLIKE_BAD"));
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, NULL) != CUPTI_SUCCESS) {
        fprintf(stderr, "pglike: cuptiSubscribe failed\n");
        return 0;
    }
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushPeriod(100);
    atexit(flush_at_exit);
    return 1;
}
