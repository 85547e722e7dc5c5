/*
 * Mock libcuda.so.1: a CPU-only CUDA driver faithful enough to test a CUPTI
 * injection shim and eBPF uprobes without a GPU.
 *
 * - Exported symbols use the real names and signatures, including the
 *   versioned (_v2/_v4/...) and per-thread (_ptsz) variants that cuda.h's
 *   macro table maps to.  Like NVIDIA's own build we compile with
 *   __CUDA_API_VERSION_INTERNAL so cuda.h declares both the macro targets and
 *   the legacy plain names.
 * - Kernels "run" instantly on a per-stream virtual clock (CLOCK_MONOTONIC ns).
 * - CUPTI (mock libcupti) plugs in through mock_internal.h; while it is absent
 *   each API call costs one extra predictable branch on mockcuda_gate.active.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include "mock_internal.h"

#include <generated_cuda_meta.h>
#include <cupti_activity.h>
#include <cupti_driver_cbid.h>

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ state */

struct mock_cupti_gate mockcuda_gate;
static const struct mock_cupti_hooks *_Atomic g_hooks;

static _Atomic uint32_t g_corr_ids;        /* global correlation id counter */
static _Atomic uint32_t g_ctx_uids, g_stream_ids, g_graph_ids;
static _Atomic uint64_t g_node_ids, g_exec_node_ids = MOCK_EXEC_NODE_ID_BASE;
static _Atomic uint64_t g_next_devptr = 0x7f0000000000ull;

static __thread uint32_t t_outer_corr;     /* id of the enclosing runtime call */
static __thread struct mock_ctx *t_ctx;    /* current context */
static __thread struct mock_stream t_ptds; /* per-thread default stream */

static pthread_mutex_t g_init_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static volatile int g_initialized;

static pthread_mutex_t g_funcs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mock_func *g_all_funcs;      /* every CUfunction ever made (ground truth) */
static char *g_gt_path;                    /* MOCK_CUDA_GROUND_TRUTH */
static _Atomic uint64_t g_residual_launches;  /* kernels run while CUPTI's residual lasted */
static _Atomic uint64_t g_residual_in_flush;  /* ...of them while a cuptiActivityFlushAll ran */

static pthread_mutex_t g_primary_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mock_ctx *g_primary;

#define MOCK_DEVICE_COUNT 1
#define MOCK_DEVICE_NAME "NVIDIA H100 80GB HBM3 (mock)"

/* ------------------------------------------------------ CUPTI plumbing */

void mockcuda_register_cupti(const struct mock_cupti_hooks *hooks)
{
    atomic_store(&g_hooks, hooks);
    mockcuda_gate.active = hooks != NULL;
}

void mockcuda_restart_correlation_ids(void)
{
    atomic_store(&g_corr_ids, 0);
}

/* Busy-waits the CPU time a modelled CUPTI cost takes: the nanoseconds in the
 * environment variable `name` (read once into *cache; unset or <= 0: none). */
static void spin_env_ns(const char *name, long *cache)
{
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && atol(e) > 0 ? atol(e) : 0;
    }
    if (!*cache) return;
    uint64_t until = mock_now_ns() + (uint64_t)*cache;
    while (mock_now_ns() < until) {
    }
}

void mockcuda_api_begin(struct mock_api_scope *s, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                        const char *name, const void *params, const char *symbol)
{
    /* A driver call made inside a runtime call shares the runtime call's id,
     * exactly like real CUDA; everything else gets a fresh id. */
    uint32_t corr = (domain == CUPTI_CB_DOMAIN_DRIVER_API && t_outer_corr)
                        ? t_outer_corr : atomic_fetch_add(&g_corr_ids, 1) + 1;
    struct mock_ctx *ctx = t_ctx;
    s->on = 1;
    s->domain = domain;
    s->cbid = cbid;
    s->ret = 0;
    s->corr_data = 0;
    s->cb.callbackSite = CUPTI_API_ENTER;
    s->cb.functionName = name;
    s->cb.functionParams = params;
    s->cb.functionReturnValue = &s->ret;
    s->cb.symbolName = symbol;
    s->cb.context = (CUcontext)ctx;
    s->cb.contextUid = ctx ? ctx->uid : 0;
    s->cb.correlationData = &s->corr_data;
    s->cb.correlationId = corr;
    s->fire = cbid < MOCK_MAX_CBID && mockcuda_gate.api[domain][cbid];
    const struct mock_cupti_hooks *h = atomic_load(&g_hooks);
    if (s->fire && h) {
        /* MOCK_CUPTI_CALLBACK_NS: CPU time CUPTI's own dispatch of an enabled API
         * callback costs the calling thread, on top of the callback (real CUPTI:
         * an enabled launch callback slows a launch-bound loop, and the shim's
         * count phase with it). */
        static long cb_ns = -1;
        spin_env_ns("MOCK_CUPTI_CALLBACK_NS", &cb_ns);
        h->api(domain, cbid, &s->cb);
    }
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        s->saved_outer = t_outer_corr;
        t_outer_corr = corr;
    }
}

void mockcuda_api_end(struct mock_api_scope *s, int ret)
{
    if (s->domain == CUPTI_CB_DOMAIN_RUNTIME_API) t_outer_corr = s->saved_outer;
    s->ret = ret;
    s->cb.callbackSite = CUPTI_API_EXIT;
    /* The context may change between enter and exit (e.g. cuCtxSetCurrent). */
    s->cb.context = (CUcontext)t_ctx;
    s->cb.contextUid = t_ctx ? t_ctx->uid : 0;
    const struct mock_cupti_hooks *h = atomic_load(&g_hooks);
    if (s->fire && h) h->api(s->domain, s->cbid, &s->cb);
}

void mockcuda_graph_resource(CUpti_CallbackId cbid, struct mock_ctx *ctx, CUgraph graph, CUgraph orig_graph,
                             CUgraphNode node, CUgraphNode orig_node, CUgraphExec exec)
{
    if (!mockcuda_gate.active || !mockcuda_gate.api[CUPTI_CB_DOMAIN_RESOURCE][cbid]) return;
    const struct mock_cupti_hooks *h = atomic_load(&g_hooks);
    if (!h || !h->resource) return;
    CUpti_GraphData gd = {
        .graph = graph, .originalGraph = orig_graph, .node = node, .originalNode = orig_node,
        .nodeType = node ? CU_GRAPH_NODE_TYPE_KERNEL : (CUgraphNodeType)0, .dependency = NULL,
        .graphExec = exec,
    };
    CUpti_ResourceData rd = { .context = (CUcontext)ctx, .resourceDescriptor = &gd };
    rd.resourceHandle.stream = NULL;
    h->resource(cbid, &rd);
}

/* Every traced entry point is bracketed by API_BEGIN / API_RETURN.  `cbid` is
 * the token after CUPTI_DRIVER_TRACE_CBID_, which is also the functionName
 * real CUPTI reports for driver calls (e.g. "cuLaunchKernel_ptsz") and the
 * prefix of the generated_cuda_meta.h params struct.  The params struct and
 * the symbol name are only built when CUPTI is attached: otherwise the cost
 * is the one branch on mockcuda_gate.active. */
#define API_BEGIN(cbid, sym, ...)                                                                   \
    struct mock_api_scope sc_;                                                                      \
    cbid##_params p_;                                                                               \
    sc_.on = 0;                                                                                     \
    if (__builtin_expect(mockcuda_gate.active, 0)) {                                                \
        p_ = (cbid##_params){ __VA_ARGS__ };                                                        \
        mockcuda_api_begin(&sc_, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##cbid, #cbid, \
                           &p_, sym);                                                               \
    }
#define API_BEGIN_NOARGS(cbid)                                                                      \
    struct mock_api_scope sc_;                                                                      \
    sc_.on = 0;                                                                                     \
    if (__builtin_expect(mockcuda_gate.active, 0))                                                  \
    mockcuda_api_begin(&sc_, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##cbid, #cbid, NULL, NULL)
#define API_RETURN(r)                                  \
    do {                                               \
        CUresult r_ = (r);                             \
        if (sc_.on) mockcuda_api_end(&sc_, (int)r_);   \
        return r_;                                     \
    } while (0)
#define SCOPE_CORR() (sc_.on ? sc_.cb.correlationId : 0u)

/* --------------------------------------------------------- init / device */

static void load_injection(void)
{
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path || !*path) return;
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "mock libcuda: cannot load CUDA_INJECTION64_PATH %s: %s\n", path, dlerror());
        return;
    }
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (!init) {
        fprintf(stderr, "mock libcuda: %s has no InitializeInjection\n", path);
        return;
    }
    init();
}

static CUresult init_impl(void)
{
    const char *fail = getenv("MOCK_CUDA_FAIL_INIT");
    if (fail && !strcmp(fail, "1")) return CUDA_ERROR_NO_DEVICE;
    if (g_initialized) return CUDA_SUCCESS;
    /* Recursive lock: the injection's InitializeInjection may call cuInit. */
    pthread_mutex_lock(&g_init_mu);
    if (!g_initialized) {
        g_initialized = 1;
        load_injection();
    }
    pthread_mutex_unlock(&g_init_mu);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    API_BEGIN(cuInit, NULL, Flags);
    API_RETURN(init_impl());
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    API_BEGIN(cuDriverGetVersion, NULL, driverVersion);
    if (!driverVersion) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *driverVersion = CUDA_VERSION;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    API_BEGIN(cuDeviceGetCount, NULL, count);
    if (!g_initialized) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (!count) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *count = MOCK_DEVICE_COUNT;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    API_BEGIN(cuDeviceGet, NULL, device, ordinal);
    if (!g_initialized) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (!device) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (ordinal < 0 || ordinal >= MOCK_DEVICE_COUNT) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    API_BEGIN(cuDeviceGetName, NULL, name, len, dev);
    if (!g_initialized) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (!name || len <= 0) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= MOCK_DEVICE_COUNT) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    snprintf(name, (size_t)len, "%s", MOCK_DEVICE_NAME);
    API_RETURN(CUDA_SUCCESS);
}

/* A fixed UUID per ordinal: GPU-6d6f636b-... ("mock"), the ordinal in the last byte. */
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    API_BEGIN(cuDeviceGetUuid_v2, NULL, uuid, dev);
    if (!g_initialized) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (!uuid) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= MOCK_DEVICE_COUNT) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    static const unsigned char base[16] = {0x6d, 0x6f, 0x63, 0x6b, 0x00, 0x01, 0x02, 0x03,
                                           0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x00};
    memcpy(uuid->bytes, base, 16);
    uuid->bytes[15] = (char)dev;
    API_RETURN(CUDA_SUCCESS);
}

#undef cuDeviceGetUuid
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

/* ------------------------------------------------------------ contexts */

static void stream_init(struct mock_stream *s, struct mock_ctx *ctx)
{
    s->magic = MOCK_STREAM_MAGIC;
    s->id = atomic_fetch_add(&g_stream_ids, 1) + 1;
    s->ctx = ctx;
    atomic_store(&s->busy_until, 0);
    atomic_store(&s->capture, NULL);
}

static struct mock_ctx *ctx_new(CUdevice dev)
{
    struct mock_ctx *c = calloc(1, sizeof(*c));
    c->magic = MOCK_CTX_MAGIC;
    c->uid = atomic_fetch_add(&g_ctx_uids, 1) + 1;
    c->device = dev;
    stream_init(&c->legacy, c);
    return c;
}

static inline struct mock_ctx *as_ctx(CUcontext c)
{
    struct mock_ctx *m = (struct mock_ctx *)c;
    return m && m->magic == MOCK_CTX_MAGIC ? m : NULL;
}

CUcontext mockcuda_primary_ctx(CUdevice dev)
{
    pthread_mutex_lock(&g_primary_mu);
    if (!g_primary) g_primary = ctx_new(dev);
    pthread_mutex_unlock(&g_primary_mu);
    return (CUcontext)g_primary;
}
CUcontext mockcuda_current_ctx(void) { return (CUcontext)t_ctx; }
void mockcuda_set_current_ctx(CUcontext ctx) { t_ctx = as_ctx(ctx); }

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= MOCK_DEVICE_COUNT) return CUDA_ERROR_INVALID_DEVICE;
    t_ctx = ctx_new(dev);   /* like the real driver: new context becomes current */
    *pctx = (CUcontext)t_ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    API_BEGIN(cuCtxCreate, NULL, pctx, flags, dev);
    API_RETURN(ctx_create(pctx, dev));
}
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    API_BEGIN(cuCtxCreate_v2, NULL, pctx, flags, dev);
    API_RETURN(ctx_create(pctx, dev));
}
CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    API_BEGIN(cuCtxCreate_v3, NULL, pctx, paramsArray, numParams, flags, dev);
    API_RETURN(ctx_create(pctx, dev));
}
CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
                                CUdevice dev)
{
    API_BEGIN(cuCtxCreate_v4, NULL, pctx, ctxCreateParams, flags, dev);
    API_RETURN(ctx_create(pctx, dev));
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    API_BEGIN(cuCtxDestroy_v2, NULL, ctx);
    struct mock_ctx *c = as_ctx(ctx);
    if (!c) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (t_ctx == c) t_ctx = NULL;
    /* Leaked on purpose: activity records and other threads may still refer to it. */
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    API_BEGIN(cuCtxGetCurrent, NULL, pctx);
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *pctx = (CUcontext)t_ctx;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    API_BEGIN(cuCtxSetCurrent, NULL, ctx);
    if (ctx && !as_ctx(ctx)) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    t_ctx = as_ctx(ctx);
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    API_BEGIN(cuCtxGetDevice, NULL, device);
    if (!t_ctx) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (!device) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *device = t_ctx->device;
    API_RETURN(CUDA_SUCCESS);
}

/* Execution is instant, so synchronisation has nothing to wait for. */
CUresult CUDAAPI cuCtxSynchronize(void)
{
    API_BEGIN_NOARGS(cuCtxSynchronize);
    API_RETURN(t_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    API_BEGIN(cuDevicePrimaryCtxRetain, NULL, pctx, dev);
    if (!g_initialized) API_RETURN(CUDA_ERROR_NOT_INITIALIZED);
    if (!pctx) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= MOCK_DEVICE_COUNT) API_RETURN(CUDA_ERROR_INVALID_DEVICE);
    *pctx = mockcuda_primary_ctx(dev);
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    API_BEGIN(cuDevicePrimaryCtxRelease_v2, NULL, dev);
    API_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------- memory */

static CUdeviceptr fake_alloc(size_t n)
{
    n = (n + 255) & ~(size_t)255;
    return (CUdeviceptr)atomic_fetch_add(&g_next_devptr, n ? n : 256);
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    API_BEGIN(cuMemAlloc_v2, NULL, dptr, bytesize);
    if (!t_ctx) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (!dptr || !bytesize) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *dptr = fake_alloc(bytesize);
    API_RETURN(CUDA_SUCCESS);
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    API_BEGIN(cuMemAlloc, NULL, dptr, bytesize);
    if (!t_ctx) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (!dptr || !bytesize) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *dptr = (CUdeviceptr_v1)(fake_alloc(bytesize) & 0xffffffffu);
    API_RETURN(CUDA_SUCCESS);
}
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    API_BEGIN(cuMemFree_v2, NULL, dptr);
    API_RETURN(t_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}
CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr)
{
    API_BEGIN(cuMemFree, NULL, dptr);
    API_RETURN(t_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

/* ------------------------------------------------------ modules / funcs */

struct mock_def { char *name; uint64_t ns; char *pcs; };
struct mock_module {
    uint32_t magic;
    uint32_t id;                   /* CUpti_ModuleResourceData.moduleId */
    char *image;                   /* the "cubin": its text, or the file its `cubin=`
                                    * line names, announced at load */
    char *cubin_path;
    size_t image_size;
    uint64_t crc;                  /* what the mock's cuptiGetCubinCrc says of it */
    pthread_mutex_t mu;
    struct mock_def *defs;
    size_t ndefs;
    struct mock_func *funcs;
};

/* Image format (text): one `name=duration_ns[@pc:weight,...]` per line; names may
 * be many KB. The pcs say where the PC Sampling API's samples of the kernel land.
 * A line `cubin=PATH` makes that file (a real cubin, with line info) the module's
 * "cubin": what MODULE_LOADED announces and cuptiGetCubinCrc sums. */
static void parse_image(struct mock_module *m, const char *img)
{
    size_t cap = 0;
    while (img && *img) {
        const char *eol = strchr(img, '\n');
        size_t len = eol ? (size_t)(eol - img) : strlen(img);
        const char *eq = memrchr(img, '=', len);
        if (len > 6 && !strncmp(img, "cubin=", 6)) {
            free(m->cubin_path);
            m->cubin_path = strndup(img + 6, len - 6);
        } else if (eq && img[0] != '#' && eq > img) {
            if (m->ndefs == cap) {
                cap = cap ? cap * 2 : 16;
                m->defs = realloc(m->defs, cap * sizeof(*m->defs));
            }
            m->defs[m->ndefs].name = strndup(img, (size_t)(eq - img));
            m->defs[m->ndefs].ns = strtoull(eq + 1, NULL, 10);
            const char *at = memchr(eq, '@', len - (size_t)(eq - img));
            m->defs[m->ndefs].pcs = at ? strndup(at + 1, len - (size_t)(at + 1 - img)) : NULL;
            m->ndefs++;
        }
        img += len + (eol ? 1 : 0);
    }
}

struct mock_module *mockcuda_module_load(const char *image)
{
    static _Atomic uint32_t next_id = 1;
    struct mock_module *m = calloc(1, sizeof(*m));
    m->magic = MOCK_MOD_MAGIC;
    m->id = atomic_fetch_add(&next_id, 1);
    pthread_mutex_init(&m->mu, NULL);
    parse_image(m, image);
    FILE *f = m->cubin_path ? fopen(m->cubin_path, "rb") : NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        m->image = malloc(n > 0 ? (size_t)n : 1);
        m->image_size = n > 0 ? fread(m->image, 1, (size_t)n, f) : 0;
        fclose(f);
    } else {
        if (m->cubin_path) fprintf(stderr, "mock libcuda: cubin=%s: cannot read it\n", m->cubin_path);
        m->image = strdup(image ? image : "");
        m->image_size = strlen(m->image);
    }
    m->crc = 0xcbf29ce484222325ull;  /* FNV-1a 64, as the mock's cuptiGetCubinCrc */
    for (size_t i = 0; i < m->image_size; i++) m->crc = (m->crc ^ (uint8_t)m->image[i]) * 0x100000001b3ull;
    return m;
}

uint64_t mockcuda_module_crc(const struct mock_module *m)
{
    return m ? m->crc : 0;
}

/* CUPTI_CBID_RESOURCE_MODULE_LOADED, with the module's image as its cubin. */
static void module_loaded(struct mock_module *m)
{
    CUpti_CallbackId cbid = CUPTI_CBID_RESOURCE_MODULE_LOADED;
    if (!mockcuda_gate.active || !mockcuda_gate.api[CUPTI_CB_DOMAIN_RESOURCE][cbid]) return;
    const struct mock_cupti_hooks *h = atomic_load(&g_hooks);
    if (!h || !h->resource) return;
    CUpti_ModuleResourceData md = { .moduleId = m->id, .cubinSize = m->image_size, .pCubin = m->image };
    CUpti_ResourceData rd = { .context = (CUcontext)t_ctx, .resourceDescriptor = &md };
    rd.resourceHandle.stream = NULL;
    h->resource(cbid, &rd);
}

struct mock_func *mockcuda_module_function(struct mock_module *m, const char *name)
{
    pthread_mutex_lock(&m->mu);
    struct mock_func *f;
    for (f = m->funcs; f; f = f->next_in_mod)
        if (!strcmp(f->name, name)) goto out;
    f = calloc(1, sizeof(*f));
    f->magic = MOCK_FUNC_MAGIC;
    f->name = strdup(name);
    f->mod = m;
    f->block[0] = f->block[1] = f->block[2] = 1;
    f->duration_ns = 1000 + (mock_fnv1a32(name) % 9000);
    f->npcs = 1; /* pc 0x0, weight 1 */
    f->pc_weight[0] = 1;
    for (size_t i = 0; i < m->ndefs; i++)
        if (!strcmp(m->defs[i].name, name)) {
            f->duration_ns = m->defs[i].ns;
            const char *p = m->defs[i].pcs;
            for (uint32_t n = 0; p && *p && n < MOCK_MAX_PCS; n++) {
                char *end;
                f->pc[n] = strtoull(p, &end, 0);
                f->pc_weight[n] = *end == ':' ? (uint32_t)strtoul(end + 1, &end, 10) : 1;
                f->npcs = n + 1;
                p = *end == ',' ? end + 1 : "";
            }
            break;
        }
    f->next_in_mod = m->funcs;
    m->funcs = f;
    pthread_mutex_lock(&g_funcs_mu);
    f->next_all = g_all_funcs;
    g_all_funcs = f;
    pthread_mutex_unlock(&g_funcs_mu);
out:
    pthread_mutex_unlock(&m->mu);
    return f;
}

static inline struct mock_func *as_func(CUfunction f)
{
    struct mock_func *m = (struct mock_func *)f;
    return m && m->magic == MOCK_FUNC_MAGIC ? m : NULL;
}
static inline const char *func_name(CUfunction f)
{
    struct mock_func *m = as_func(f);
    return m ? m->name : NULL;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    API_BEGIN(cuModuleLoadData, NULL, module, image);
    if (!t_ctx) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (!module || !image) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *module = (CUmodule)mockcuda_module_load(image);
    module_loaded((struct mock_module *)*module);
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    API_BEGIN(cuModuleUnload, NULL, hmod);
    /* Functions stay alive: activity records point at their names. */
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    API_BEGIN(cuModuleGetFunction, NULL, hfunc, hmod, name);
    struct mock_module *m = (struct mock_module *)hmod;
    if (!m || m->magic != MOCK_MOD_MAGIC) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!hfunc || !name) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *hfunc = (CUfunction)mockcuda_module_function(m, name);
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
    API_BEGIN(cuFuncGetName, NULL, name, hfunc);
    if (!name) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!as_func(hfunc)) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    *name = as_func(hfunc)->name;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
{
    API_BEGIN(cuFuncSetBlockShape, func_name(hfunc), hfunc, x, y, z);
    struct mock_func *f = as_func(hfunc);
    if (!f) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    f->block[0] = (unsigned)x; f->block[1] = (unsigned)y; f->block[2] = (unsigned)z;
    API_RETURN(CUDA_SUCCESS);
}

/* ------------------------------------------------------------- streams */

/* Resolve a stream handle.  NULL means the legacy stream of the current
 * context, or the per-thread stream for _ptsz entry points. */
static CUresult resolve_stream(CUstream h, int ptsz, struct mock_stream **out)
{
    if (h == CU_STREAM_PER_THREAD || (!h && ptsz)) {
        if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
        if (t_ptds.magic != MOCK_STREAM_MAGIC) stream_init(&t_ptds, t_ctx);
        t_ptds.ctx = t_ctx;
        *out = &t_ptds;
        return CUDA_SUCCESS;
    }
    if (!h || h == CU_STREAM_LEGACY) {
        if (!t_ctx) return CUDA_ERROR_INVALID_CONTEXT;
        *out = &t_ctx->legacy;
        return CUDA_SUCCESS;
    }
    struct mock_stream *s = (struct mock_stream *)h;
    if (s->magic != MOCK_STREAM_MAGIC) return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

uint32_t mockcuda_stream_id(CUcontext ctx, CUstream h, int per_thread)
{
    struct mock_ctx *saved = t_ctx, *c = as_ctx(ctx);
    struct mock_stream *s = NULL;
    if (c) t_ctx = c;
    CUresult r = resolve_stream(h, per_thread, &s);
    t_ctx = saved;
    return r == CUDA_SUCCESS ? s->id : 0;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    API_BEGIN(cuStreamCreate, NULL, phStream, Flags);
    if (!t_ctx) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    if (!phStream) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    struct mock_stream *s = calloc(1, sizeof(*s));
    stream_init(s, t_ctx);
    *phStream = (CUstream)s;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    API_BEGIN(cuStreamDestroy_v2, NULL, hStream);
    struct mock_stream *s;
    CUresult r = resolve_stream(hStream, 0, &s);
    /* Not freed: a handle may still be in flight in another thread's record. */
    API_RETURN(r);
}

static CUresult stream_sync(CUstream h, int ptsz)
{
    struct mock_stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r == CUDA_SUCCESS && atomic_load(&s->capture)) r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return r;
}
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    API_BEGIN(cuStreamSynchronize, NULL, hStream);
    API_RETURN(stream_sync(hStream, 0));
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    API_BEGIN(cuStreamSynchronize_ptsz, NULL, hStream);
    API_RETURN(stream_sync(hStream, 1));
}

/* ------------------------------------------------------ kernel execution */

struct launch_desc {
    struct mock_func *f;
    unsigned grid[3], block[3], shmem;
    uint8_t launch_type;
};

static void exec_kernel(struct mock_stream *s, const struct launch_desc *d, uint32_t corr,
                        uint32_t graph_id, uint64_t node_id)
{
    uint64_t now = mock_now_ns(), dur = d->f->duration_ns;
    /* A bounded launch queue: the launch MOCK_QUEUE_DEPTH back must have finished,
     * or this one waits for it. A host that launches faster than the GPU runs the
     * kernels is held back to the GPU's pace, and a kernel starts at most a queue's
     * worth of work after its launch (unbounded, the mock GPU fell seconds behind). */
    /* MOCK_CUDA_QUEUE_DEPTH (1..MOCK_QUEUE_DEPTH; 0: unbounded, for the instruction-
     * count guard, where waits would make the counts depend on timing). */
    static long depth = -1;
    if (__builtin_expect(depth < 0, 0)) {
        const char *e = getenv("MOCK_CUDA_QUEUE_DEPTH");
        long v = e ? atol(e) : MOCK_QUEUE_DEPTH;
        depth = v < 0 || v > MOCK_QUEUE_DEPTH ? MOCK_QUEUE_DEPTH : v;
    }
    _Atomic uint64_t *slot = NULL;
    if (depth) {
        uint64_t seq = atomic_fetch_add_explicit(&s->queued, 1, memory_order_relaxed);
        slot = &s->ends[seq % (uint64_t)depth];
        uint64_t oldest = atomic_load_explicit(slot, memory_order_relaxed);
        if (oldest > now) {
            if (oldest - now > 100000) {
                struct timespec ts = {0, (long)(oldest - now - 50000)};
                nanosleep(&ts, NULL);
            }
            while ((now = mock_now_ns()) < oldest) {
            }
        }
    }
    uint64_t busy = atomic_load_explicit(&s->busy_until, memory_order_relaxed), start;
    do {
        start = busy > now ? busy : now;
    } while (!atomic_compare_exchange_weak(&s->busy_until, &busy, start + dur));
    if (slot) atomic_store_explicit(slot, start + dur, memory_order_relaxed);
    if (__builtin_expect(mockcuda_gate.pc_sampling, 0)) {
        const struct mock_cupti_hooks *ph = atomic_load(&g_hooks);
        if (ph && ph->pc_sample) ph->pc_sample(d->f, dur);
    }
    if (g_gt_path) {
        atomic_fetch_add_explicit(&d->f->gt_launches, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&d->f->gt_ns, dur, memory_order_relaxed);
    }
    int activity = mockcuda_gate.kernel_activity;
    if (__builtin_expect(mockcuda_gate.instrumented && !activity, 0)) {
        /* CUPTI's residual: kernel activity was on and no cuptiFinalize came since
         * (an H100 paid 1-1.4 us a launch for the process's life). */
        static long residual_ns = -1;
        atomic_fetch_add_explicit(&g_residual_launches, 1, memory_order_relaxed);
        if (mockcuda_gate.flushing) atomic_fetch_add_explicit(&g_residual_in_flush, 1, memory_order_relaxed);
        spin_env_ns("MOCK_CUPTI_RESIDUAL_LAUNCH_NS", &residual_ns);
    }
    if (__builtin_expect(activity || (graph_id && mockcuda_gate.graph_nodes), 0)) {
        /* MOCK_CUPTI_ACTIVITY_LAUNCH_NS: CPU time each launch costs while kernel
         * activity is on (real CUPTI: a launch-bound loop slows inside windows). */
        static long spin_ns = -1;
        if (activity) spin_env_ns("MOCK_CUPTI_ACTIVITY_LAUNCH_NS", &spin_ns);
        const struct mock_cupti_hooks *h = atomic_load(&g_hooks);
        if (!h || !h->kernel) return;
        struct mock_kernel_exec k = {
            .func = d->f, .start = start, .end = start + dur,
            .device_id = (uint32_t)s->ctx->device, .context_id = s->ctx->uid, .stream_id = s->id,
            .correlation_id = corr + (uint32_t)mockcuda_gate.corr_scrambled, /* see mock_cupti.c's set_gate */
            .graph_id = graph_id, .graph_node_id = node_id,
            .grid = { d->grid[0], d->grid[1], d->grid[2] },
            .block = { d->block[0], d->block[1], d->block[2] },
            .shmem = d->shmem, .launch_type = d->launch_type, .activity_on = (uint8_t)activity,
        };
        h->kernel(&k);
    }
}

/* A launch on a capturing stream becomes a kernel node instead of running
 * (also cuGraphAddKernelNode). GRAPHNODE_CREATED fires inside the calling API. */
static struct mock_node *capture_node(struct mock_graph *g, const struct launch_desc *d)
{
    struct mock_node *n = calloc(1, sizeof(*n));
    n->magic = MOCK_NODE_MAGIC;
    n->id = atomic_fetch_add(&g_node_ids, 1) + 1;
    n->graph = g;
    n->f = d->f;
    memcpy(n->grid, d->grid, sizeof n->grid);
    memcpy(n->block, d->block, sizeof n->block);
    n->shmem = d->shmem;
    n->launch_type = d->launch_type;
    pthread_mutex_lock(&g->mu);
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 8;
        g->nodes = realloc(g->nodes, g->cap * sizeof(*g->nodes));
    }
    g->nodes[g->n++] = n;
    pthread_mutex_unlock(&g->mu);
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, g->ctx, (CUgraph)g, NULL,
                            (CUgraphNode)n, NULL, NULL);
    return n;
}

static CUresult launch(const struct launch_desc *d, CUstream h, int ptsz, uint32_t corr)
{
    if (!d->f) return CUDA_ERROR_INVALID_HANDLE;
    if (!d->grid[0] || !d->grid[1] || !d->grid[2] || !d->block[0] || !d->block[1] || !d->block[2])
        return CUDA_ERROR_INVALID_VALUE;
    struct mock_stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r != CUDA_SUCCESS) return r;
    struct mock_graph *cap = atomic_load(&s->capture);
    if (cap) capture_node(cap, d);
    else exec_kernel(s, d, corr, 0, 0);
    return CUDA_SUCCESS;
}

#define DESC(f_, gx, gy, gz, bx, by, bz, sh, lt) \
    { as_func(f_), { gx, gy, gz }, { bx, by, bz }, sh, lt }

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
    API_BEGIN(cuLaunchKernel, func_name(f), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
              sharedMemBytes, hStream, kernelParams, extra);
    struct launch_desc d = DESC(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                sharedMemBytes, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR);
    API_RETURN(launch(&d, hStream, 0, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    API_BEGIN(cuLaunchKernel_ptsz, func_name(f), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
              blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
    struct launch_desc d = DESC(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                sharedMemBytes, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR);
    API_RETURN(launch(&d, hStream, 1, SCOPE_CORR()));
}

static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, int ptsz, uint32_t corr)
{
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    uint8_t lt = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
    for (unsigned i = 0; i < c->numAttrs; i++)
        if (c->attrs && c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && c->attrs[i].value.cooperative)
            lt = CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE;
    struct launch_desc d = DESC(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                                c->blockDimZ, c->sharedMemBytes, lt);
    return launch(&d, c->hStream, ptsz, corr);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
    API_BEGIN(cuLaunchKernelEx, func_name(f), config, f, kernelParams, extra);
    API_RETURN(launch_ex(config, f, 0, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                       void **extra)
{
    API_BEGIN(cuLaunchKernelEx_ptsz, func_name(f), config, f, kernelParams, extra);
    API_RETURN(launch_ex(config, f, 1, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                           unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                           void **kernelParams)
{
    API_BEGIN(cuLaunchCooperativeKernel, func_name(f), f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
              blockDimZ, sharedMemBytes, hStream, kernelParams);
    struct launch_desc d = DESC(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                sharedMemBytes, CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE);
    API_RETURN(launch(&d, hStream, 0, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX,
                                                unsigned int blockDimY, unsigned int blockDimZ,
                                                unsigned int sharedMemBytes, CUstream hStream,
                                                void **kernelParams)
{
    API_BEGIN(cuLaunchCooperativeKernel_ptsz, func_name(f), f, gridDimX, gridDimY, gridDimZ, blockDimX,
              blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
    struct launch_desc d = DESC(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                sharedMemBytes, CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_SINGLE_DEVICE);
    API_RETURN(launch(&d, hStream, 1, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices,
                                                      unsigned int flags)
{
    API_BEGIN(cuLaunchCooperativeKernelMultiDevice,
              launchParamsList && numDevices ? func_name(launchParamsList[0].function) : NULL, launchParamsList,
              numDevices, flags);
    if (!launchParamsList || !numDevices || numDevices > MOCK_DEVICE_COUNT) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    for (unsigned i = 0; i < numDevices; i++) {
        CUDA_LAUNCH_PARAMS *l = &launchParamsList[i];
        struct launch_desc d = DESC(l->function, l->gridDimX, l->gridDimY, l->gridDimZ, l->blockDimX,
                                    l->blockDimY, l->blockDimZ, l->sharedMemBytes,
                                    CUPTI_ACTIVITY_LAUNCH_TYPE_COOPERATIVE_MULTI_DEVICE);
        CUresult r = launch(&d, l->hStream, 0, SCOPE_CORR());
        if (r != CUDA_SUCCESS) API_RETURN(r);
    }
    API_RETURN(CUDA_SUCCESS);
}

/* Legacy launches use the block shape from cuFuncSetBlockShape. */
static CUresult launch_grid(CUfunction f, int gw, int gh, CUstream h, uint32_t corr)
{
    struct mock_func *m = as_func(f);
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    struct launch_desc d = DESC(f, (unsigned)gw, (unsigned)gh, 1, m->block[0], m->block[1], m->block[2],
                                m->shmem, CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR);
    return launch(&d, h, 0, corr);
}

CUresult CUDAAPI cuLaunch(CUfunction f)
{
    API_BEGIN(cuLaunch, func_name(f), f);
    API_RETURN(launch_grid(f, 1, 1, NULL, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
    API_BEGIN(cuLaunchGrid, func_name(f), f, grid_width, grid_height);
    API_RETURN(launch_grid(f, grid_width, grid_height, NULL, SCOPE_CORR()));
}

CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
    API_BEGIN(cuLaunchGridAsync, func_name(f), f, grid_width, grid_height, hStream);
    API_RETURN(launch_grid(f, grid_width, grid_height, hStream, SCOPE_CORR()));
}

/* -------------------------------------------------------------- graphs */

static struct mock_graph *new_graph(struct mock_ctx *ctx)
{
    struct mock_graph *g = calloc(1, sizeof(*g));
    g->magic = MOCK_GRAPH_MAGIC;
    g->id = atomic_fetch_add(&g_graph_ids, 1) + 1;
    g->ctx = ctx;
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

static CUresult begin_capture(CUstream h, int ptsz)
{
    struct mock_stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r != CUDA_SUCCESS) return r;
    if (s == &s->ctx->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (atomic_load(&s->capture)) return CUDA_ERROR_ILLEGAL_STATE;
    struct mock_graph *g = new_graph(s->ctx);
    atomic_store(&s->capture, g);
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, g->ctx, (CUgraph)g, NULL, NULL, NULL, NULL);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
    API_BEGIN(cuStreamBeginCapture, NULL, hStream);
    API_RETURN(begin_capture(hStream, 0));
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream hStream)
{
    API_BEGIN(cuStreamBeginCapture_ptsz, NULL, hStream);
    API_RETURN(begin_capture(hStream, 1));
}
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    API_BEGIN(cuStreamBeginCapture_v2, NULL, hStream, mode);
    API_RETURN(begin_capture(hStream, 0));
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    API_BEGIN(cuStreamBeginCapture_v2_ptsz, NULL, hStream, mode);
    API_RETURN(begin_capture(hStream, 1));
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, int ptsz)
{
    struct mock_stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r != CUDA_SUCCESS) return r;
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    struct mock_graph *g = atomic_exchange(&s->capture, NULL);
    if (!g) return CUDA_ERROR_ILLEGAL_STATE;
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    API_BEGIN(cuStreamEndCapture, NULL, hStream, phGraph);
    API_RETURN(end_capture(hStream, phGraph, 0));
}
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    API_BEGIN(cuStreamEndCapture_ptsz, NULL, hStream, phGraph);
    API_RETURN(end_capture(hStream, phGraph, 1));
}

static inline struct mock_graph *as_graph(CUgraph g)
{
    struct mock_graph *m = (struct mock_graph *)g;
    return m && m->magic == MOCK_GRAPH_MAGIC ? m : NULL;
}

/* Explicit graph building: an empty graph in the current context, then kernel
 * nodes added one by one (dependencies are accepted and ignored: nodes run in
 * the order they were added). */
CUresult CUDAAPI cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    API_BEGIN(cuGraphCreate, NULL, phGraph, flags);
    if (!phGraph) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    if (!t_ctx) API_RETURN(CUDA_ERROR_INVALID_CONTEXT);
    struct mock_graph *g = new_graph(t_ctx);
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, g->ctx, (CUgraph)g, NULL, NULL, NULL, NULL);
    *phGraph = (CUgraph)g;
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
    API_BEGIN(cuGraphAddKernelNode_v2, NULL, phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    struct mock_graph *g = as_graph(hGraph);
    if (!g) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    if (!phGraphNode || !nodeParams) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    const CUDA_KERNEL_NODE_PARAMS *k = nodeParams;
    struct launch_desc d = { as_func(k->func), { k->gridDimX, k->gridDimY, k->gridDimZ },
                             { k->blockDimX, k->blockDimY, k->blockDimZ }, k->sharedMemBytes,
                             CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR };
    if (!d.f) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    *phGraphNode = (CUgraphNode)capture_node(g, &d);
    API_RETURN(CUDA_SUCCESS);
}
static inline struct mock_exec *as_exec(CUgraphExec x)
{
    struct mock_exec *m = (struct mock_exec *)x;
    return m && m->magic == MOCK_EXEC_MAGIC ? m : NULL;
}

/* Instantiation clones every node; clones get ids from a separate counter and
 * the exec graph its own graph id, as in real CUDA where the executable graph
 * is a distinct object from the captured one. */
static CUresult instantiate(CUgraphExec *phExec, CUgraph hGraph)
{
    struct mock_graph *g = as_graph(hGraph);
    if (!phExec) return CUDA_ERROR_INVALID_VALUE;
    if (!g) return CUDA_ERROR_INVALID_HANDLE;
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING, g->ctx, hGraph, NULL, NULL, NULL, NULL);
    struct mock_exec *x = calloc(1, sizeof(*x));
    x->magic = MOCK_EXEC_MAGIC;
    x->id = atomic_fetch_add(&g_graph_ids, 1) + 1;
    x->ctx = g->ctx;
    pthread_mutex_lock(&g->mu);
    x->n = g->n;
    x->nodes = calloc(x->n ? x->n : 1, sizeof(*x->nodes));
    for (size_t i = 0; i < x->n; i++) {
        x->nodes[i] = *g->nodes[i];
        x->nodes[i].id = atomic_fetch_add(&g_exec_node_ids, 1);
        x->nodes[i].graph = NULL;
        x->nodes[i].orig = g->nodes[i];
    }
    pthread_mutex_unlock(&g->mu);
    for (size_t i = 0; i < x->n; i++)
        mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, g->ctx, hGraph, hGraph,
                                (CUgraphNode)&x->nodes[i], (CUgraphNode)x->nodes[i].orig, (CUgraphExec)x);
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, g->ctx, hGraph, NULL, NULL, NULL,
                            (CUgraphExec)x);
    *phExec = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    API_BEGIN(cuGraphInstantiateWithFlags, NULL, phGraphExec, hGraph, flags);
    API_RETURN(instantiate(phGraphExec, hGraph));
}
/* Pre-12.0 ABI: cuGraphInstantiate(exec, graph, errNode, log, logSize). */
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                    char *logBuffer, size_t bufferSize)
{
    API_BEGIN(cuGraphInstantiate, NULL, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
    API_RETURN(instantiate(phGraphExec, hGraph));
}
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
                                       char *logBuffer, size_t bufferSize)
{
    API_BEGIN(cuGraphInstantiate_v2, NULL, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
    API_RETURN(instantiate(phGraphExec, hGraph));
}

static CUresult graph_launch(CUgraphExec hx, CUstream h, int ptsz, uint32_t corr)
{
    struct mock_exec *x = as_exec(hx);
    if (!x) return CUDA_ERROR_INVALID_HANDLE;
    struct mock_stream *s;
    CUresult r = resolve_stream(h, ptsz, &s);
    if (r != CUDA_SUCCESS) return r;
    if (atomic_load(&s->capture)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (mockcuda_gate.active) mockcuda_gate.graph_replayed = 1; /* CUPTI will not start again after a finalize */
    /* Every node runs in order; all share the cuGraphLaunch correlation id. */
    for (size_t i = 0; i < x->n; i++) {
        const struct mock_node *n = &x->nodes[i];
        struct launch_desc d = { n->f, { n->grid[0], n->grid[1], n->grid[2] },
                                 { n->block[0], n->block[1], n->block[2] }, n->shmem, n->launch_type };
        exec_kernel(s, &d, corr, x->id, n->id);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    API_BEGIN(cuGraphLaunch, NULL, hGraphExec, hStream);
    API_RETURN(graph_launch(hGraphExec, hStream, 0, SCOPE_CORR()));
}
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    API_BEGIN(cuGraphLaunch_ptsz, NULL, hGraphExec, hStream);
    API_RETURN(graph_launch(hGraphExec, hStream, 1, SCOPE_CORR()));
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    API_BEGIN(cuGraphExecDestroy, NULL, hGraphExec);
    struct mock_exec *x = as_exec(hGraphExec);
    if (!x) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING, x->ctx, NULL, NULL, NULL, NULL,
                            hGraphExec);
    x->magic = 0;
    free(x->nodes);
    free(x);
    API_RETURN(CUDA_SUCCESS);
}

CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
    API_BEGIN(cuGraphDestroy, NULL, hGraph);
    struct mock_graph *g = as_graph(hGraph);
    if (!g) API_RETURN(CUDA_ERROR_INVALID_HANDLE);
    for (size_t i = 0; i < g->n; i++)
        mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, g->ctx, hGraph, NULL,
                                (CUgraphNode)g->nodes[i], NULL, NULL);
    mockcuda_graph_resource(CUPTI_CBID_RESOURCE_GRAPH_DESTROY_STARTING, g->ctx, hGraph, NULL, NULL, NULL, NULL);
    for (size_t i = 0; i < g->n; i++) {
        g->nodes[i]->magic = 0;
        free(g->nodes[i]);
    }
    g->magic = 0;
    free(g->nodes);
    pthread_mutex_destroy(&g->mu);
    free(g);
    API_RETURN(CUDA_SUCCESS);
}

/* -------------------------------------------------------------- errors */

static const char *err_string(CUresult e, int want_name)
{
    switch (e) {
#define E(code, str) case code: return want_name ? #code : str;
    E(CUDA_SUCCESS, "no error")
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument")
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error")
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down")
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context")
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found")
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing")
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported")
    E(CUDA_ERROR_UNKNOWN, "unknown error")
#undef E
    default: return NULL;
    }
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    API_BEGIN(cuGetErrorString, NULL, error, pStr);
    if (!pStr) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *pStr = err_string(error, 0);
    API_RETURN(*pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    API_BEGIN(cuGetErrorName, NULL, error, pStr);
    if (!pStr) API_RETURN(CUDA_ERROR_INVALID_VALUE);
    *pStr = err_string(error, 1);
    API_RETURN(*pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* --------------------------------------------------------- ground truth */

static int cmp_func_name(const void *a, const void *b)
{
    return strcmp((*(struct mock_func *const *)a)->name, (*(struct mock_func *const *)b)->name);
}

/* TSV `kernel\tlaunches\tgpu_ns`, one line per distinct mangled name that
 * executed (captured-only kernels are skipped), sorted by name. */
static void write_ground_truth(void)
{
    size_t n = 0, i;
    pthread_mutex_lock(&g_funcs_mu);
    for (struct mock_func *f = g_all_funcs; f; f = f->next_all) n++;
    struct mock_func **v = malloc((n ? n : 1) * sizeof(*v));
    n = 0;
    for (struct mock_func *f = g_all_funcs; f; f = f->next_all) v[n++] = f;
    pthread_mutex_unlock(&g_funcs_mu);
    qsort(v, n, sizeof(*v), cmp_func_name);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", g_gt_path, (int)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fprintf(stderr, "mock libcuda: cannot write ground truth %s\n", g_gt_path);
        free(v);
        return;
    }
    fputs("kernel\tlaunches\tgpu_ns\n", out);
    for (i = 0; i < n;) {
        uint64_t launches = 0, ns = 0;
        size_t j = i;
        for (; j < n && !strcmp(v[j]->name, v[i]->name); j++) {
            launches += atomic_load(&v[j]->gt_launches);
            ns += atomic_load(&v[j]->gt_ns);
        }
        if (launches)
            fprintf(out, "%s\t%llu\t%llu\n", v[i]->name, (unsigned long long)launches, (unsigned long long)ns);
        i = j;
    }
    fclose(out);
    rename(tmp, g_gt_path);   /* readers never see a half-written file */
    free(v);
}

__attribute__((constructor)) static void mock_cuda_ctor(void)
{
    const char *gt = getenv("MOCK_CUDA_GROUND_TRUTH");
    if (gt && *gt) g_gt_path = strdup(gt);
}

__attribute__((destructor)) static void mock_cuda_dtor(void)
{
    if (g_gt_path) write_ground_truth();
    /* MOCK_CUDA_REPORT=1: what the process paid for CUPTI after its windows. */
    const char *rep = getenv("MOCK_CUDA_REPORT");
    if (rep && *rep == '1')
        fprintf(stderr, "mock libcuda: %llu kernels ran with CUPTI's residual (kernel activity on before, "
                "no cuptiFinalize since), %llu of them while a cuptiActivityFlushAll ran\n",
                (unsigned long long)atomic_load(&g_residual_launches),
                (unsigned long long)atomic_load(&g_residual_in_flush));
}
