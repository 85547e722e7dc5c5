/*
 * Mock libcudart.so.13: the runtime API subset the profiler cares about, built
 * on the mock driver exactly like the real runtime is built on libcuda:
 * each runtime call fires RUNTIME_API enter/exit around the driver call(s) it
 * makes, and those driver calls report the runtime call's correlation id.
 *
 * Kernel names: the name given to __cudaRegisterFunction (what nvcc's
 * generated registration code passes), else the dladdr() symbol of the host
 * stub (nvcc gives host stubs the kernel's mangled name).
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <generated_cuda_runtime_api_meta.h>
#include <cupti_runtime_cbid.h>
#include <fatbinary_section.h>
#include "mock_internal.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* Removed from the CUDA 13 headers; CUDA 12 ABI. */
struct cudaLaunchParams {
    void *func;
    dim3 gridDim;
    dim3 blockDim;
    void **args;
    size_t sharedMem;
    cudaStream_t stream;
};
typedef struct cudaLaunchCooperativeKernelMultiDevice_v9000_params_st {
    struct cudaLaunchParams *launchParamsList;
    unsigned int numDevices;
    unsigned int flags;
} cudaLaunchCooperativeKernelMultiDevice_v9000_params;
cudaError_t CUDARTAPI cudaLaunchCooperativeKernelMultiDevice(struct cudaLaunchParams *launchParamsList,
                                                             unsigned int numDevices, unsigned int flags);

void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle);
void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                      dim3 *bDim, dim3 *gDim, int *wSize);

/* ---------------------------------------------------------- API bracket */

/* `name` is the functionName CUPTI reports: the cbid name without _vNNNN.
 * As in libcuda, params are only materialised when CUPTI is attached. */
#define RT_BEGIN(cbid, name, sym, ...)                                                                \
    struct mock_api_scope sc_;                                                                      \
    cbid##_params p_;                                                                               \
    sc_.on = 0;                                                                                     \
    if (__builtin_expect(mockcuda_gate.active, 0)) {                                                \
        p_ = (cbid##_params){ __VA_ARGS__ };                                                        \
        mockcuda_api_begin(&sc_, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##cbid, name, \
                           &p_, sym);                                                               \
    }
#define RT_BEGIN_NOARGS(cbid, name)                                                                   \
    struct mock_api_scope sc_;                                                                      \
    sc_.on = 0;                                                                                     \
    if (__builtin_expect(mockcuda_gate.active, 0))                                                  \
    mockcuda_api_begin(&sc_, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##cbid, name, NULL, NULL)
#define RT_RETURN(e)                                  \
    do {                                              \
        cudaError_t e_ = (e);                         \
        if (e_ != cudaSuccess) t_last_error = e_;     \
        if (sc_.on) mockcuda_api_end(&sc_, (int)e_);  \
        return e_;                                    \
    } while (0)

static __thread cudaError_t t_last_error;
static __thread int t_device;

static cudaError_t to_rt(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_NO_DEVICE: return cudaErrorNoDevice;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_ILLEGAL_STATE: return cudaErrorIllegalState;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
    }
}

/* Implicit initialisation on every runtime call: cuInit once (this is what
 * makes CUDA_INJECTION64_PATH work for runtime-only apps), then bind the
 * primary context to the calling thread if it has no current context. */
static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
static CUresult g_init_result;
static void init_once(void) { g_init_result = cuInit(0); }

static inline cudaError_t rt_init(void)
{
    pthread_once(&g_init_once, init_once);
    if (g_init_result != CUDA_SUCCESS) return to_rt(g_init_result);
    if (__builtin_expect(!mockcuda_current_ctx(), 0)) mockcuda_set_current_ctx(mockcuda_primary_ctx(t_device));
    return cudaSuccess;
}

/* ------------------------------------------------- host stub -> function */

struct fentry { const void *host; struct mock_func *f; };
#define FTAB_SIZE 16384  /* power of two; insert-only */
static struct fentry *_Atomic g_ftab[FTAB_SIZE];
static pthread_mutex_t g_ftab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mock_module *g_default_mod;   /* kernels found via dladdr */

static inline size_t ftab_hash(const void *p) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull >> 50; }

/* Lock-free lookup: entries are fully built before being published. */
static struct mock_func *ftab_find(const void *host)
{
    for (size_t i = ftab_hash(host), n = 0; n < FTAB_SIZE; i = (i + 1) & (FTAB_SIZE - 1), n++) {
        struct fentry *e = atomic_load_explicit(&g_ftab[i], memory_order_acquire);
        if (!e) return NULL;
        if (e->host == host) return e->f;
    }
    return NULL;
}

static void ftab_insert(const void *host, struct mock_func *f)
{
    pthread_mutex_lock(&g_ftab_mu);
    for (size_t i = ftab_hash(host), n = 0; n < FTAB_SIZE; i = (i + 1) & (FTAB_SIZE - 1), n++) {
        struct fentry *e = atomic_load(&g_ftab[i]);
        if (e && e->host == host) { e->f = f; break; }   /* re-registration */
        if (!e) {
            e = malloc(sizeof(*e));
            e->host = host;
            e->f = f;
            atomic_store_explicit(&g_ftab[i], e, memory_order_release);
            break;
        }
    }
    pthread_mutex_unlock(&g_ftab_mu);
}

static struct mock_func *func_for_host(const void *host)
{
    if (!host) return NULL;
    struct mock_func *f = ftab_find(host);
    if (__builtin_expect(f != NULL, 1)) return f;
    Dl_info di;
    if (!dladdr(host, &di) || !di.dli_sname || di.dli_saddr != host) return NULL;
    pthread_mutex_lock(&g_ftab_mu);
    if (!g_default_mod) g_default_mod = mockcuda_module_load(NULL);
    pthread_mutex_unlock(&g_ftab_mu);
    f = mockcuda_module_function(g_default_mod, di.dli_sname);
    ftab_insert(host, f);
    return f;
}

/* The mock "fatbin": a __fatBinC_Wrapper_t whose data points at a text
 * image in the cuModuleLoadData format (`name=duration_ns` lines). */
void **CUDARTAPI __cudaRegisterFatBinary(void *fatCubin)
{
    const __fatBinC_Wrapper_t *w = fatCubin;
    const char *image = (w && w->magic == FATBINC_MAGIC) ? (const char *)w->data : NULL;
    struct mock_module **h = malloc(sizeof(*h));
    *h = mockcuda_module_load(image);
    return (void **)h;
}

void CUDARTAPI __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

/* Functions stay registered: activity records keep pointing at their names. */
void CUDARTAPI __cudaUnregisterFatBinary(void **fatCubinHandle) { (void)fatCubinHandle; }

void CUDARTAPI __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                      dim3 *bDim, dim3 *gDim, int *wSize)
{
    const char *name = deviceName ? deviceName : deviceFun;
    if (!fatCubinHandle || !hostFun || !name) return;
    ftab_insert(hostFun, mockcuda_module_function(*(struct mock_module **)fatCubinHandle, name));
}

/* ---------------------------------------------------- device / memory */

cudaError_t CUDARTAPI cudaGetDeviceCount(int *count)
{
    RT_BEGIN(cudaGetDeviceCount_v3020, "cudaGetDeviceCount", NULL, count);
    pthread_once(&g_init_once, init_once);
    if (g_init_result != CUDA_SUCCESS) {
        if (count) *count = 0;
        RT_RETURN(to_rt(g_init_result));
    }
    RT_RETURN(to_rt(cuDeviceGetCount(count)));
}

cudaError_t CUDARTAPI cudaSetDevice(int device)
{
    RT_BEGIN(cudaSetDevice_v3020, "cudaSetDevice", NULL, device);
    pthread_once(&g_init_once, init_once);
    if (g_init_result != CUDA_SUCCESS) RT_RETURN(to_rt(g_init_result));
    int n = 0;
    cuDeviceGetCount(&n);
    if (device < 0 || device >= n) RT_RETURN(cudaErrorInvalidDevice);
    t_device = device;
    mockcuda_set_current_ctx(mockcuda_primary_ctx(device));
    RT_RETURN(cudaSuccess);
}

cudaError_t CUDARTAPI cudaGetDevice(int *device)
{
    RT_BEGIN(cudaGetDevice_v3020, "cudaGetDevice", NULL, device);
    if (!device) RT_RETURN(cudaErrorInvalidValue);
    *device = t_device;
    RT_RETURN(cudaSuccess);
}

cudaError_t CUDARTAPI cudaRuntimeGetVersion(int *runtimeVersion)
{
    RT_BEGIN(cudaRuntimeGetVersion_v3020, "cudaRuntimeGetVersion", NULL, runtimeVersion);
    if (!runtimeVersion) RT_RETURN(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    RT_RETURN(cudaSuccess);
}

cudaError_t CUDARTAPI cudaDriverGetVersion(int *driverVersion)
{
    RT_BEGIN(cudaDriverGetVersion_v3020, "cudaDriverGetVersion", NULL, driverVersion);
    RT_RETURN(to_rt(cuDriverGetVersion(driverVersion)));
}

cudaError_t CUDARTAPI cudaMalloc(void **devPtr, size_t size)
{
    RT_BEGIN(cudaMalloc_v3020, "cudaMalloc", NULL, devPtr, size);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!devPtr) RT_RETURN(cudaErrorInvalidValue);
    if (!size) { *devPtr = NULL; RT_RETURN(cudaSuccess); }
    CUdeviceptr d = 0;
    CUresult r = cuMemAlloc_v2(&d, size);
    *devPtr = (void *)(uintptr_t)d;
    RT_RETURN(to_rt(r));
}

cudaError_t CUDARTAPI cudaFree(void *devPtr)
{
    RT_BEGIN(cudaFree_v3020, "cudaFree", NULL, devPtr);
    cudaError_t e = rt_init();   /* cudaFree(0) is the classic "init the runtime" idiom */
    if (e != cudaSuccess || !devPtr) RT_RETURN(e);
    RT_RETURN(to_rt(cuMemFree_v2((CUdeviceptr)(uintptr_t)devPtr)));
}

cudaError_t CUDARTAPI cudaDeviceSynchronize(void)
{
    RT_BEGIN_NOARGS(cudaDeviceSynchronize_v3020, "cudaDeviceSynchronize");
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuCtxSynchronize()));
}

/* ------------------------------------------------------------- streams */

cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t *pStream)
{
    RT_BEGIN(cudaStreamCreate_v3020, "cudaStreamCreate", NULL, pStream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamCreate((CUstream *)pStream, 0)));
}

cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t stream)
{
    RT_BEGIN(cudaStreamDestroy_v5050, "cudaStreamDestroy", NULL, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamDestroy_v2((CUstream)stream)));
}

cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t stream)
{
    RT_BEGIN(cudaStreamSynchronize_v3020, "cudaStreamSynchronize", NULL, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamSynchronize((CUstream)stream)));
}

cudaError_t CUDARTAPI cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    RT_BEGIN(cudaStreamSynchronize_ptsz_v7000, "cudaStreamSynchronize_ptsz", NULL, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamSynchronize_ptsz((CUstream)stream)));
}

/* ------------------------------------------------------------- launches */

cudaError_t CUDARTAPI cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream)
{
    struct mock_func *f = func_for_host(func);
    RT_BEGIN(cudaLaunchKernel_v7000, "cudaLaunchKernel", f ? f->name : NULL, func, gridDim, blockDim, args,
             sharedMem, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
    RT_RETURN(to_rt(cuLaunchKernel((CUfunction)f, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
                                   blockDim.z, (unsigned)sharedMem, (CUstream)stream, args, NULL)));
}

cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                            size_t sharedMem, cudaStream_t stream)
{
    struct mock_func *f = func_for_host(func);
    RT_BEGIN(cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel_ptsz", f ? f->name : NULL, func, gridDim, blockDim,
             args, sharedMem, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
    RT_RETURN(to_rt(cuLaunchKernel_ptsz((CUfunction)f, gridDim.x, gridDim.y, gridDim.z, blockDim.x, blockDim.y,
                                        blockDim.z, (unsigned)sharedMem, (CUstream)stream, args, NULL)));
}

/* cudaLaunchAttribute and CUlaunchAttribute share one layout (documented). */
static CUresult launch_ex(const cudaLaunchConfig_t *c, struct mock_func *f, void **args, int ptsz)
{
    if (!c) return CUDA_ERROR_INVALID_VALUE;
    CUlaunchConfig cc = {
        c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x, c->blockDim.y, c->blockDim.z,
        (unsigned)c->dynamicSmemBytes, (CUstream)c->stream, (CUlaunchAttribute *)c->attrs, c->numAttrs,
    };
    return ptsz ? cuLaunchKernelEx_ptsz(&cc, (CUfunction)f, args, NULL)
                : cuLaunchKernelEx(&cc, (CUfunction)f, args, NULL);
}

cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    struct mock_func *f = func_for_host(func);
    RT_BEGIN(cudaLaunchKernelExC_v11060, "cudaLaunchKernelExC", f ? f->name : NULL, config, func, args);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
    RT_RETURN(to_rt(launch_ex(config, f, args, 0)));
}

cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    struct mock_func *f = func_for_host(func);
    RT_BEGIN(cudaLaunchKernelExC_ptsz_v11060, "cudaLaunchKernelExC_ptsz", f ? f->name : NULL, config, func, args);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
    RT_RETURN(to_rt(launch_ex(config, f, args, 1)));
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                  size_t sharedMem, cudaStream_t stream)
{
    struct mock_func *f = func_for_host(func);
    RT_BEGIN(cudaLaunchCooperativeKernel_v9000, "cudaLaunchCooperativeKernel", f ? f->name : NULL, func,
             gridDim, blockDim, args, sharedMem, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
    RT_RETURN(to_rt(cuLaunchCooperativeKernel((CUfunction)f, gridDim.x, gridDim.y, gridDim.z, blockDim.x,
                                              blockDim.y, blockDim.z, (unsigned)sharedMem, (CUstream)stream,
                                              args)));
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                       void **args, size_t sharedMem, cudaStream_t stream)
{
    struct mock_func *f = func_for_host(func);
    RT_BEGIN(cudaLaunchCooperativeKernel_ptsz_v9000, "cudaLaunchCooperativeKernel_ptsz", f ? f->name : NULL,
             func, gridDim, blockDim, args, sharedMem, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
    RT_RETURN(to_rt(cuLaunchCooperativeKernel_ptsz((CUfunction)f, gridDim.x, gridDim.y, gridDim.z, blockDim.x,
                                                   blockDim.y, blockDim.z, (unsigned)sharedMem,
                                                   (CUstream)stream, args)));
}

cudaError_t CUDARTAPI cudaLaunchCooperativeKernelMultiDevice(struct cudaLaunchParams *launchParamsList,
                                                             unsigned int numDevices, unsigned int flags)
{
    struct mock_func *f0 = launchParamsList && numDevices ? func_for_host(launchParamsList[0].func) : NULL;
    RT_BEGIN(cudaLaunchCooperativeKernelMultiDevice_v9000, "cudaLaunchCooperativeKernelMultiDevice",
             f0 ? f0->name : NULL, launchParamsList, numDevices, flags);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    if (!launchParamsList || !numDevices || numDevices > 16) RT_RETURN(cudaErrorInvalidValue);
    CUDA_LAUNCH_PARAMS lp[16];
    for (unsigned i = 0; i < numDevices; i++) {
        const struct cudaLaunchParams *l = &launchParamsList[i];
        struct mock_func *f = func_for_host(l->func);
        if (!f) RT_RETURN(cudaErrorInvalidDeviceFunction);
        lp[i] = (CUDA_LAUNCH_PARAMS){ (CUfunction)f, l->gridDim.x, l->gridDim.y, l->gridDim.z, l->blockDim.x,
                                      l->blockDim.y, l->blockDim.z, (unsigned)l->sharedMem,
                                      (CUstream)l->stream, l->args };
    }
    RT_RETURN(to_rt(cuLaunchCooperativeKernelMultiDevice(lp, numDevices, flags)));
}

/* -------------------------------------------------------------- graphs */

cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    RT_BEGIN(cudaStreamBeginCapture_v10000, "cudaStreamBeginCapture", NULL, stream, mode);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamBeginCapture_v2((CUstream)stream, (CUstreamCaptureMode)mode)));
}

cudaError_t CUDARTAPI cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    RT_BEGIN(cudaStreamBeginCapture_ptsz_v10000, "cudaStreamBeginCapture_ptsz", NULL, stream, mode);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamBeginCapture_v2_ptsz((CUstream)stream, (CUstreamCaptureMode)mode)));
}

cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    RT_BEGIN(cudaStreamEndCapture_v10000, "cudaStreamEndCapture", NULL, stream, pGraph);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamEndCapture((CUstream)stream, (CUgraph *)pGraph)));
}

cudaError_t CUDARTAPI cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    RT_BEGIN(cudaStreamEndCapture_ptsz_v10000, "cudaStreamEndCapture_ptsz", NULL, stream, pGraph);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuStreamEndCapture_ptsz((CUstream)stream, (CUgraph *)pGraph)));
}

cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    RT_BEGIN(cudaGraphInstantiate_v12000, "cudaGraphInstantiate", NULL, pGraphExec, graph, flags);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags)));
}

cudaError_t CUDARTAPI cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                    unsigned long long flags)
{
    RT_BEGIN(cudaGraphInstantiateWithFlags_v11040, "cudaGraphInstantiateWithFlags", NULL, pGraphExec, graph, flags);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuGraphInstantiateWithFlags((CUgraphExec *)pGraphExec, (CUgraph)graph, flags)));
}

cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    RT_BEGIN(cudaGraphLaunch_v10000, "cudaGraphLaunch", NULL, graphExec, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuGraphLaunch((CUgraphExec)graphExec, (CUstream)stream)));
}

cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    RT_BEGIN(cudaGraphLaunch_ptsz_v10000, "cudaGraphLaunch_ptsz", NULL, graphExec, stream);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuGraphLaunch_ptsz((CUgraphExec)graphExec, (CUstream)stream)));
}

cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
    RT_BEGIN(cudaGraphExecDestroy_v10000, "cudaGraphExecDestroy", NULL, graphExec);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuGraphExecDestroy((CUgraphExec)graphExec)));
}

cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph)
{
    RT_BEGIN(cudaGraphDestroy_v10000, "cudaGraphDestroy", NULL, graph);
    cudaError_t e = rt_init();
    if (e != cudaSuccess) RT_RETURN(e);
    RT_RETURN(to_rt(cuGraphDestroy((CUgraph)graph)));
}

/* -------------------------------------------------------------- errors */

static const char *rt_err(cudaError_t e, int want_name)
{
    switch (e) {
#define E(code, str) case code: return want_name ? #code : str;
    E(cudaSuccess, "no error")
    E(cudaErrorInvalidValue, "invalid argument")
    E(cudaErrorMemoryAllocation, "out of memory")
    E(cudaErrorInitializationError, "initialization error")
    E(cudaErrorNoDevice, "no CUDA-capable device is detected")
    E(cudaErrorInvalidDevice, "invalid device ordinal")
    E(cudaErrorDeviceUninitialized, "invalid device context")
    E(cudaErrorInvalidResourceHandle, "invalid resource handle")
    E(cudaErrorInvalidDeviceFunction, "invalid device function")
    E(cudaErrorIllegalState, "the operation cannot be performed in the present state")
    E(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")
    E(cudaErrorNotSupported, "operation not supported")
#undef E
    default: return want_name ? "cudaErrorUnknown" : "unknown error";
    }
}

/* These return strings, so functionReturnValue points at a dummy 0. */
const char *CUDARTAPI cudaGetErrorString(cudaError_t error)
{
    RT_BEGIN(cudaGetErrorString_v3020, "cudaGetErrorString", NULL, error);
    if (sc_.on) mockcuda_api_end(&sc_, 0);
    return rt_err(error, 0);
}

const char *CUDARTAPI cudaGetErrorName(cudaError_t error)
{
    RT_BEGIN(cudaGetErrorName_v6050, "cudaGetErrorName", NULL, error);
    if (sc_.on) mockcuda_api_end(&sc_, 0);
    return rt_err(error, 1);
}

cudaError_t CUDARTAPI cudaGetLastError(void)
{
    RT_BEGIN_NOARGS(cudaGetLastError_v3020, "cudaGetLastError");
    cudaError_t e = t_last_error;
    t_last_error = cudaSuccess;
    if (sc_.on) mockcuda_api_end(&sc_, (int)e);
    return e;
}

cudaError_t CUDARTAPI cudaPeekAtLastError(void)
{
    RT_BEGIN_NOARGS(cudaPeekAtLastError_v3020, "cudaPeekAtLastError");
    if (sc_.on) mockcuda_api_end(&sc_, (int)t_last_error);
    return t_last_error;
}
