/*
 * mock_workload: exercises every kernel-launch path of the (mock) CUDA stack,
 * each from its own non-inlined function `launch_<api>` launching its own
 * kernel `k_<api>(float*, int)` (mangled `_Z<len>k_<api>Pfi`), so a profiler's
 * stacks and kernel names can be checked path by path.  Graph paths capture 3
 * kernels `k_<api>_node<i>` in `capture_<api>` and launch the graph.
 *
 *   mock_workload [--paths all|p1,p2,...] [--iters N] [--sleep-ms M]
 *                 [--duration S] [--threads T] [--list-paths]
 *                 (SIGUSR1 ends the loop after its current iteration: a test ends a
 *                 --duration run once what it waits for has happened)
 *   mock_workload --bench N [--api cuLaunchKernel|cudaLaunchKernel|cuGraphLaunch|cuLaunchKernel-table] [--rate R]
 *                 [--warm N --warm-rate R] [--gap-ms G --gap-every-ms E] [--block B] [--spin-ns S]
 *                 [--work-ns S] [--idle-first-ms M] [--regimes MS:NS] [--end-ms M] [--table-after-ms M]
 *                 [--table-every K] [--table-fn cuLaunchKernel|cuLaunchKernelEx] [--warm-until-counted 1]
 *                 [--libs-after-ms M1,M2]
 *                 [--phases MS:API[:EVERY]]
 *   --cupti-client AT_MS:HOLD_MS  (--bench) another CUPTI client in the process, as
 *                 torch.profiler is: from AT_MS on it tries cuptiSubscribe_v2 every ms
 *                 until CUPTI is free, holds it HOLD_MS, and unsubscribes
 *
 * Built -O1 -fno-inline -fomit-frame-pointer -rdynamic: stacks need eh_frame.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <dlfcn.h>
#include <fatbinary_section.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* cuLaunch, cuLaunchGrid... on purpose */

/* Per-thread-default-stream entry points are only declared by the headers
 * under CUDA_API_PER_THREAD_DEFAULT_STREAM; we call both flavours explicitly. */
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *, CUfunction, void **, void **);
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                unsigned, unsigned, CUstream, void **);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec, CUstream);
cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *, const void *, void **);
cudaError_t CUDARTAPI cudaLaunchCooperativeKernel_ptsz(const void *, dim3, dim3, void **, size_t, cudaStream_t);
cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t, cudaStream_t);
/* Removed from the CUDA 13 headers (CUDA 12 ABI). */
struct cudaLaunchParams { void *func; dim3 gridDim; dim3 blockDim; void **args; size_t sharedMem; cudaStream_t stream; };
cudaError_t CUDARTAPI cudaLaunchCooperativeKernelMultiDevice(struct cudaLaunchParams *, unsigned, unsigned);
void **CUDARTAPI __cudaRegisterFatBinary(void *);
void CUDARTAPI __cudaRegisterFatBinaryEnd(void **);
void CUDARTAPI __cudaRegisterFunction(void **, const char *, char *, const char *, int, uint3 *, uint3 *, dim3 *,
                                      dim3 *, int *);

/* ------------------------------------------------------------ helpers */

static void ck_cu(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return;
    const char *s = NULL;
    cuGetErrorString(r, &s);
    fprintf(stderr, "mock_workload: %s failed: %d (%s)\n", what, (int)r, s ? s : "?");
    exit(1);
}

static void ck_rt(cudaError_t e, const char *what)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "mock_workload: %s failed: %d (%s)\n", what, (int)e, cudaGetErrorString(e));
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------ runtime kernel stubs */

/* Host stubs carry the kernel's mangled name as their symbol, like nvcc's. */
#define STUB(sym, mangled)                                       \
    void sym(float *p, int n) __asm__(mangled);                  \
    NOINLINE void sym(float *p, int n) { __asm__ volatile("" ::"r"(p), "r"(n)); }
STUB(stub_cudaLaunchKernel, "_Z18k_cudaLaunchKernelPfi")
STUB(stub_cudaLaunchKernel_ptsz, "_Z23k_cudaLaunchKernel_ptszPfi")
STUB(stub_cudaLaunchKernelExC, "_Z21k_cudaLaunchKernelExCPfi")
STUB(stub_cudaLaunchKernelExC_ptsz, "_Z26k_cudaLaunchKernelExC_ptszPfi")
STUB(stub_cudaLaunchCooperativeKernel, "_Z29k_cudaLaunchCooperativeKernelPfi")
STUB(stub_cudaLaunchCooperativeKernel_ptsz, "_Z34k_cudaLaunchCooperativeKernel_ptszPfi")
STUB(stub_cudaLaunchCooperativeKernelMultiDevice, "_Z40k_cudaLaunchCooperativeKernelMultiDevicePfi")
STUB(stub_cudaGraphLaunch_node0, "_Z23k_cudaGraphLaunch_node0Pfi")
STUB(stub_cudaGraphLaunch_node1, "_Z23k_cudaGraphLaunch_node1Pfi")
STUB(stub_cudaGraphLaunch_node2, "_Z23k_cudaGraphLaunch_node2Pfi")
STUB(stub_cudaGraphLaunch_ptsz_node0, "_Z28k_cudaGraphLaunch_ptsz_node0Pfi")
STUB(stub_cudaGraphLaunch_ptsz_node1, "_Z28k_cudaGraphLaunch_ptsz_node1Pfi")
STUB(stub_cudaGraphLaunch_ptsz_node2, "_Z28k_cudaGraphLaunch_ptsz_node2Pfi")

/* What nvcc's generated registration code does, with a mock "fatbin" whose
 * data is a `name=duration_ns` text image.  k_cudaLaunchCooperativeKernelMultiDevice
 * is deliberately left unregistered: libcudart must name it via dladdr(). */
static const char rt_image[] =
    "_Z18k_cudaLaunchKernelPfi=21000\n"
    "_Z23k_cudaLaunchKernel_ptszPfi=22000\n"
    "_Z21k_cudaLaunchKernelExCPfi=23000\n"
    "_Z26k_cudaLaunchKernelExC_ptszPfi=24000\n"
    "_Z29k_cudaLaunchCooperativeKernelPfi=25000\n"
    "_Z34k_cudaLaunchCooperativeKernel_ptszPfi=26000\n"
    "_Z23k_cudaGraphLaunch_node0Pfi=27000\n"
    "_Z23k_cudaGraphLaunch_node1Pfi=27100\n"
    "_Z23k_cudaGraphLaunch_node2Pfi=27200\n"
    "_Z28k_cudaGraphLaunch_ptsz_node0Pfi=28000\n"
    "_Z28k_cudaGraphLaunch_ptsz_node1Pfi=28100\n"
    "_Z28k_cudaGraphLaunch_ptsz_node2Pfi=28200\n";
static __fatBinC_Wrapper_t rt_fatbin = { FATBINC_MAGIC, 1, (const unsigned long long *)rt_image, NULL };

__attribute__((constructor)) static void register_kernels(void)
{
    void **h = __cudaRegisterFatBinary(&rt_fatbin);
#define REG(stub, name) __cudaRegisterFunction(h, (const char *)stub, (char *)name, name, -1, 0, 0, 0, 0, 0)
    REG(stub_cudaLaunchKernel, "_Z18k_cudaLaunchKernelPfi");
    REG(stub_cudaLaunchKernel_ptsz, "_Z23k_cudaLaunchKernel_ptszPfi");
    REG(stub_cudaLaunchKernelExC, "_Z21k_cudaLaunchKernelExCPfi");
    REG(stub_cudaLaunchKernelExC_ptsz, "_Z26k_cudaLaunchKernelExC_ptszPfi");
    REG(stub_cudaLaunchCooperativeKernel, "_Z29k_cudaLaunchCooperativeKernelPfi");
    REG(stub_cudaLaunchCooperativeKernel_ptsz, "_Z34k_cudaLaunchCooperativeKernel_ptszPfi");
    REG(stub_cudaGraphLaunch_node0, "_Z23k_cudaGraphLaunch_node0Pfi");
    REG(stub_cudaGraphLaunch_node1, "_Z23k_cudaGraphLaunch_node1Pfi");
    REG(stub_cudaGraphLaunch_node2, "_Z23k_cudaGraphLaunch_node2Pfi");
    REG(stub_cudaGraphLaunch_ptsz_node0, "_Z28k_cudaGraphLaunch_ptsz_node0Pfi");
    REG(stub_cudaGraphLaunch_ptsz_node1, "_Z28k_cudaGraphLaunch_ptsz_node1Pfi");
    REG(stub_cudaGraphLaunch_ptsz_node2, "_Z28k_cudaGraphLaunch_ptsz_node2Pfi");
#undef REG
    __cudaRegisterFatBinaryEnd(h);
}

/* ---------------------------------------------------- driver kernels */

enum {
    K_cuLaunch, K_cuLaunchGrid, K_cuLaunchGridAsync, K_cuLaunchKernel, K_cuLaunchKernel_ptsz, K_cuLaunchKernelEx,
    K_cuLaunchKernelEx_ptsz, K_cuLaunchCooperativeKernel, K_cuLaunchCooperativeKernel_ptsz,
    K_cuLaunchCooperativeKernelMultiDevice, K_cuGraphLaunch_node0, K_cuGraphLaunch_node1, K_cuGraphLaunch_node2,
    K_cuGraphLaunch_ptsz_node0, K_cuGraphLaunch_ptsz_node1, K_cuGraphLaunch_ptsz_node2, K_long, NK
};
static const char *const drv_kernel_api[NK] = {
    "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
    "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz",
    "cuLaunchCooperativeKernelMultiDevice", "cuGraphLaunch_node0", "cuGraphLaunch_node1", "cuGraphLaunch_node2",
    "cuGraphLaunch_ptsz_node0", "cuGraphLaunch_ptsz_node1", "cuGraphLaunch_ptsz_node2", NULL,
};
static CUfunction g_fn[NK];
static CUcontext g_ctx;

/* `void k_long_name<0, 1, ..., 999>(float*, int)`: a ~5.9 KB mangled name. */
static char *long_kernel_name(void)
{
    size_t cap = 8192, len = 0;
    char *s = malloc(cap);
    len += (size_t)sprintf(s, "_Z11k_long_nameI");
    for (int i = 0; i < 1000; i++) len += (size_t)sprintf(s + len, "Li%dE", i);
    sprintf(s + len, "EvPfi");
    return s;
}

/* Module image: `name=duration_ns` lines.  k_cuLaunch is left out on purpose
 * so it gets the default fnv1a-derived duration. */
static void load_driver_module(void)
{
    char *names[NK];
    size_t cap = 16384, len = 0;
    char *img = malloc(cap);
    img[0] = 0;
    for (int i = 0; i < NK; i++) {
        if (drv_kernel_api[i]) {
            names[i] = malloc(256);
            snprintf(names[i], 256, "_Z%zuk_%sPfi", strlen(drv_kernel_api[i]) + 2, drv_kernel_api[i]);
        } else {
            names[i] = long_kernel_name();
        }
        if (i != K_cuLaunch) len += (size_t)snprintf(img + len, cap - len, "%s=%d\n", names[i], 2000 + 500 * i);
    }
    CUmodule mod;
    ck_cu(cuModuleLoadData(&mod, img), "cuModuleLoadData");
    for (int i = 0; i < NK; i++) {
        ck_cu(cuModuleGetFunction(&g_fn[i], mod, names[i]), "cuModuleGetFunction");
        free(names[i]);
    }
    free(img);
    ck_cu(cuFuncSetBlockShape(g_fn[K_cuLaunch], 64, 1, 1), "cuFuncSetBlockShape");
    ck_cu(cuFuncSetBlockShape(g_fn[K_cuLaunchGrid], 64, 1, 1), "cuFuncSetBlockShape");
    ck_cu(cuFuncSetBlockShape(g_fn[K_cuLaunchGridAsync], 64, 1, 1), "cuFuncSetBlockShape");
}

/* --------------------------------------------------------- per thread */

struct tctx {
    CUstream s;                 /* driver-created stream */
    cudaStream_t rs;            /* runtime-created stream */
    float *buf;
    int n;
    void *args[2];
    CUgraph g_cu, g_cu_ptsz;
    CUgraphExec x_cu, x_cu_ptsz;
    cudaGraph_t g_rt, g_rt_ptsz;
    cudaGraphExec_t x_rt, x_rt_ptsz;
};

static const dim3 GRID = { 4, 1, 1 }, BLOCK = { 128, 1, 1 };

/* Each launch_ function checks the result after the call, so the CUDA call
 * is never a tail call and the function stays on the unwound stack. */
NOINLINE void launch_cuLaunch(struct tctx *t) { ck_cu(cuLaunch(g_fn[K_cuLaunch]), "cuLaunch"); }
NOINLINE void launch_cuLaunchGrid(struct tctx *t)
{
    ck_cu(cuLaunchGrid(g_fn[K_cuLaunchGrid], 4, 1), "cuLaunchGrid");
}
NOINLINE void launch_cuLaunchGridAsync(struct tctx *t)
{
    ck_cu(cuLaunchGridAsync(g_fn[K_cuLaunchGridAsync], 4, 1, t->s), "cuLaunchGridAsync");
}
NOINLINE void launch_cuLaunchKernel(struct tctx *t)
{
    ck_cu(cuLaunchKernel(g_fn[K_cuLaunchKernel], 4, 1, 1, 128, 1, 1, 0, t->s, t->args, NULL), "cuLaunchKernel");
}
NOINLINE void launch_cuLaunchKernel_ptsz(struct tctx *t)
{
    /* NULL stream + _ptsz = this thread's per-thread default stream. */
    ck_cu(cuLaunchKernel_ptsz(g_fn[K_cuLaunchKernel_ptsz], 4, 1, 1, 128, 1, 1, 0, NULL, t->args, NULL),
          "cuLaunchKernel_ptsz");
}
NOINLINE void launch_cuLaunchKernelEx(struct tctx *t)
{
    CUlaunchConfig c = { 4, 1, 1, 128, 1, 1, 0, t->s, NULL, 0 };
    ck_cu(cuLaunchKernelEx(&c, g_fn[K_cuLaunchKernelEx], t->args, NULL), "cuLaunchKernelEx");
}
NOINLINE void launch_cuLaunchKernelEx_ptsz(struct tctx *t)
{
    CUlaunchConfig c = { 4, 1, 1, 128, 1, 1, 0, t->s, NULL, 0 };
    ck_cu(cuLaunchKernelEx_ptsz(&c, g_fn[K_cuLaunchKernelEx_ptsz], t->args, NULL), "cuLaunchKernelEx_ptsz");
}
NOINLINE void launch_cuLaunchCooperativeKernel(struct tctx *t)
{
    ck_cu(cuLaunchCooperativeKernel(g_fn[K_cuLaunchCooperativeKernel], 4, 1, 1, 128, 1, 1, 0, t->s, t->args),
          "cuLaunchCooperativeKernel");
}
NOINLINE void launch_cuLaunchCooperativeKernel_ptsz(struct tctx *t)
{
    ck_cu(cuLaunchCooperativeKernel_ptsz(g_fn[K_cuLaunchCooperativeKernel_ptsz], 4, 1, 1, 128, 1, 1, 0, t->s,
                                         t->args),
          "cuLaunchCooperativeKernel_ptsz");
}
NOINLINE void launch_cuLaunchCooperativeKernelMultiDevice(struct tctx *t)
{
    CUDA_LAUNCH_PARAMS lp = { g_fn[K_cuLaunchCooperativeKernelMultiDevice], 4, 1, 1, 128, 1, 1, 0, t->s, t->args };
    ck_cu(cuLaunchCooperativeKernelMultiDevice(&lp, 1, 0), "cuLaunchCooperativeKernelMultiDevice");
}

NOINLINE void capture_cuGraphLaunch(struct tctx *t)
{
    ck_cu(cuStreamBeginCapture(t->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    for (int i = 0; i < 3; i++)
        ck_cu(cuLaunchKernel(g_fn[K_cuGraphLaunch_node0 + i], 4, 1, 1, 128, 1, 1, 0, t->s, t->args, NULL),
              "cuLaunchKernel (capture)");
    ck_cu(cuStreamEndCapture(t->s, &t->g_cu), "cuStreamEndCapture");
    ck_cu(cuGraphInstantiate(&t->x_cu, t->g_cu, 0), "cuGraphInstantiate");
}
NOINLINE void launch_cuGraphLaunch(struct tctx *t) { ck_cu(cuGraphLaunch(t->x_cu, t->s), "cuGraphLaunch"); }

NOINLINE void capture_cuGraphLaunch_ptsz(struct tctx *t)
{
    ck_cu(cuStreamBeginCapture(t->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    for (int i = 0; i < 3; i++)
        ck_cu(cuLaunchKernel(g_fn[K_cuGraphLaunch_ptsz_node0 + i], 4, 1, 1, 128, 1, 1, 0, t->s, t->args, NULL),
              "cuLaunchKernel (capture)");
    ck_cu(cuStreamEndCapture(t->s, &t->g_cu_ptsz), "cuStreamEndCapture");
    ck_cu(cuGraphInstantiate(&t->x_cu_ptsz, t->g_cu_ptsz, 0), "cuGraphInstantiate");
}
NOINLINE void launch_cuGraphLaunch_ptsz(struct tctx *t)
{
    ck_cu(cuGraphLaunch_ptsz(t->x_cu_ptsz, NULL), "cuGraphLaunch_ptsz");
}

NOINLINE void launch_cudaLaunchKernel(struct tctx *t)
{
    ck_rt(cudaLaunchKernel((const void *)stub_cudaLaunchKernel, GRID, BLOCK, t->args, 0, t->rs), "cudaLaunchKernel");
}
NOINLINE void launch_cudaLaunchKernel_ptsz(struct tctx *t)
{
    ck_rt(cudaLaunchKernel_ptsz((const void *)stub_cudaLaunchKernel_ptsz, GRID, BLOCK, t->args, 0, NULL),
          "cudaLaunchKernel_ptsz");
}
NOINLINE void launch_cudaLaunchKernelExC(struct tctx *t)
{
    cudaLaunchConfig_t c = { GRID, BLOCK, 0, t->rs, NULL, 0 };
    ck_rt(cudaLaunchKernelExC(&c, (const void *)stub_cudaLaunchKernelExC, t->args), "cudaLaunchKernelExC");
}
NOINLINE void launch_cudaLaunchKernelExC_ptsz(struct tctx *t)
{
    cudaLaunchConfig_t c = { GRID, BLOCK, 0, t->rs, NULL, 0 };
    ck_rt(cudaLaunchKernelExC_ptsz(&c, (const void *)stub_cudaLaunchKernelExC_ptsz, t->args),
          "cudaLaunchKernelExC_ptsz");
}
NOINLINE void launch_cudaLaunchCooperativeKernel(struct tctx *t)
{
    ck_rt(cudaLaunchCooperativeKernel((const void *)stub_cudaLaunchCooperativeKernel, GRID, BLOCK, t->args, 0, t->rs),
          "cudaLaunchCooperativeKernel");
}
NOINLINE void launch_cudaLaunchCooperativeKernel_ptsz(struct tctx *t)
{
    ck_rt(cudaLaunchCooperativeKernel_ptsz((const void *)stub_cudaLaunchCooperativeKernel_ptsz, GRID, BLOCK,
                                           t->args, 0, t->rs),
          "cudaLaunchCooperativeKernel_ptsz");
}
NOINLINE void launch_cudaLaunchCooperativeKernelMultiDevice(struct tctx *t)
{
    struct cudaLaunchParams lp = { (void *)stub_cudaLaunchCooperativeKernelMultiDevice, GRID, BLOCK, t->args, 0, t->rs };
    ck_rt(cudaLaunchCooperativeKernelMultiDevice(&lp, 1, 0), "cudaLaunchCooperativeKernelMultiDevice");
}

NOINLINE void capture_cudaGraphLaunch(struct tctx *t)
{
    void (*const k[3])(float *, int) = { stub_cudaGraphLaunch_node0, stub_cudaGraphLaunch_node1,
                                         stub_cudaGraphLaunch_node2 };
    ck_rt(cudaStreamBeginCapture(t->rs, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int i = 0; i < 3; i++)
        ck_rt(cudaLaunchKernel((const void *)k[i], GRID, BLOCK, t->args, 0, t->rs), "cudaLaunchKernel (capture)");
    ck_rt(cudaStreamEndCapture(t->rs, &t->g_rt), "cudaStreamEndCapture");
    ck_rt(cudaGraphInstantiate(&t->x_rt, t->g_rt, 0), "cudaGraphInstantiate");
}
NOINLINE void launch_cudaGraphLaunch(struct tctx *t) { ck_rt(cudaGraphLaunch(t->x_rt, t->rs), "cudaGraphLaunch"); }

NOINLINE void capture_cudaGraphLaunch_ptsz(struct tctx *t)
{
    void (*const k[3])(float *, int) = { stub_cudaGraphLaunch_ptsz_node0, stub_cudaGraphLaunch_ptsz_node1,
                                         stub_cudaGraphLaunch_ptsz_node2 };
    ck_rt(cudaStreamBeginCapture(t->rs, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    for (int i = 0; i < 3; i++)
        ck_rt(cudaLaunchKernel((const void *)k[i], GRID, BLOCK, t->args, 0, t->rs), "cudaLaunchKernel (capture)");
    ck_rt(cudaStreamEndCapture(t->rs, &t->g_rt_ptsz), "cudaStreamEndCapture");
    ck_rt(cudaGraphInstantiate(&t->x_rt_ptsz, t->g_rt_ptsz, 0), "cudaGraphInstantiate");
}
NOINLINE void launch_cudaGraphLaunch_ptsz(struct tctx *t)
{
    ck_rt(cudaGraphLaunch_ptsz(t->x_rt_ptsz, NULL), "cudaGraphLaunch_ptsz");
}

NOINLINE void launch_long_name_kernel(struct tctx *t)
{
    ck_cu(cuLaunchKernel(g_fn[K_long], 4, 1, 1, 128, 1, 1, 0, t->s, t->args, NULL), "cuLaunchKernel (long name)");
}

/* ------------------------------------------------------------- paths */

/* --list-paths prints the API paths only (each launches k_<path>); the
 * long-name kernel is an extra path that `all` includes. */

struct path {
    const char *name;
    void (*launch)(struct tctx *);
    void (*capture)(struct tctx *);   /* graph paths: capture + instantiate once per thread */
};
#define P(api) { #api, launch_##api, NULL }
#define G(api) { #api, launch_##api, capture_##api }
static const struct path paths[] = {
    P(cuLaunch), P(cuLaunchGrid), P(cuLaunchGridAsync), P(cuLaunchKernel), P(cuLaunchKernel_ptsz),
    P(cuLaunchKernelEx), P(cuLaunchKernelEx_ptsz), P(cuLaunchCooperativeKernel), P(cuLaunchCooperativeKernel_ptsz),
    P(cuLaunchCooperativeKernelMultiDevice), G(cuGraphLaunch), G(cuGraphLaunch_ptsz),
    P(cudaLaunchKernel), P(cudaLaunchKernel_ptsz), P(cudaLaunchKernelExC), P(cudaLaunchKernelExC_ptsz),
    P(cudaLaunchCooperativeKernel), P(cudaLaunchCooperativeKernel_ptsz), P(cudaLaunchCooperativeKernelMultiDevice),
    G(cudaGraphLaunch), G(cudaGraphLaunch_ptsz),
    P(long_name_kernel), /* must stay last: not listed */
};
#define NPATHS (sizeof paths / sizeof paths[0])
#define NLISTED (NPATHS - 1)

static int g_sel[NPATHS];
static long g_iters = 1, g_sleep_ms;
static double g_duration;
static volatile sig_atomic_t g_stop; /* SIGUSR1 */
static void on_usr1(int sig) { (void)sig; g_stop = 1; }

static void thread_setup(struct tctx *t)
{
    ck_cu(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
    ck_cu(cuStreamCreate(&t->s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    ck_rt(cudaStreamCreate(&t->rs), "cudaStreamCreate");
    ck_rt(cudaMalloc((void **)&t->buf, 1 << 20), "cudaMalloc");
    t->n = 1 << 18;
    t->args[0] = &t->buf;
    t->args[1] = &t->n;
    for (size_t i = 0; i < NPATHS; i++)
        if (g_sel[i] && paths[i].capture) paths[i].capture(t);
}

static void thread_teardown(struct tctx *t)
{
    if (t->x_cu) ck_cu(cuGraphExecDestroy(t->x_cu), "cuGraphExecDestroy");
    if (t->g_cu) ck_cu(cuGraphDestroy(t->g_cu), "cuGraphDestroy");
    if (t->x_cu_ptsz) ck_cu(cuGraphExecDestroy(t->x_cu_ptsz), "cuGraphExecDestroy");
    if (t->g_cu_ptsz) ck_cu(cuGraphDestroy(t->g_cu_ptsz), "cuGraphDestroy");
    if (t->x_rt) ck_rt(cudaGraphExecDestroy(t->x_rt), "cudaGraphExecDestroy");
    if (t->g_rt) ck_rt(cudaGraphDestroy(t->g_rt), "cudaGraphDestroy");
    if (t->x_rt_ptsz) ck_rt(cudaGraphExecDestroy(t->x_rt_ptsz), "cudaGraphExecDestroy");
    if (t->g_rt_ptsz) ck_rt(cudaGraphDestroy(t->g_rt_ptsz), "cudaGraphDestroy");
    ck_rt(cudaFree(t->buf), "cudaFree");
}

static void *thread_main(void *arg)
{
    struct tctx t;
    memset(&t, 0, sizeof t);
    thread_setup(&t);
    double end = g_duration > 0 ? now_s() + g_duration : 0;
    for (long it = 0; !g_stop && (end ? now_s() < end : it < g_iters); it++) {
        for (size_t i = 0; i < NPATHS; i++)
            if (g_sel[i]) paths[i].launch(&t);
        ck_cu(cuStreamSynchronize(t.s), "cuStreamSynchronize");
        ck_rt(cudaStreamSynchronize(t.rs), "cudaStreamSynchronize");
        ck_rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        if (g_sleep_ms) usleep((useconds_t)g_sleep_ms * 1000);
    }
    thread_teardown(&t);
    return arg;
}

static void select_paths(const char *spec)
{
    if (!strcmp(spec, "all")) {
        for (size_t i = 0; i < NPATHS; i++) g_sel[i] = 1;
        return;
    }
    char *dup = strdup(spec), *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < NPATHS && strcmp(paths[i].name, tok); i++) {}
        if (i == NPATHS) {
            fprintf(stderr, "mock_workload: unknown path '%s' (see --list-paths)\n", tok);
            exit(1);
        }
        g_sel[i] = 1;
    }
    free(dup);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Launch loop for measuring per-launch CPU cost. rate > 0 paces it to about
 * `rate` launches/s (sleeping between blocks of --block, default 1000), for measuring the agent
 * at a given kernel rate; 0 runs flat out. The first `warm` launches go at
 * `warm_rate` instead (a job whose launch rate changes: a slow, bursty start).
 * gap_ms > 0: after every gap_every_ms of launching, no launch for gap_ms (a job
 * that stops to synchronize or to load data); the pacing resumes after it.
 * MOCK_LAUNCH_TRACE=path: the loop's own launches over time, for checking the
 * shim's estimate period by period (GPU_AGENT_DEBUG=2): one line "seconds
 * launches" (CLOCK_MONOTONIC, launches so far) at the start, every 1 000
 * (MOCK_LAUNCH_TRACE_EVERY: every that many), and after each gap. */
static double g_gap_ms, g_gap_every_ms;
static long g_block = 1000; /* --block: launches between two pacing sleeps */
static long g_spin_ns;      /* --spin-ns: CPU work after each launch (a closed loop: a slower
                             * launch delays all later ones), timed by the wall clock */
static long g_idle_first_ms; /* --idle-first-ms: no launch for this long after the warm-up's (a job
                              * idle when the agent attaches: a server, one that loads data) */
static long g_work_ns;      /* --work-ns: the same, timed by the thread's CPU time: a loop whose
                             * launches cost CPU, not time, as a real job's do when preempted */
static long g_regime_ms, g_regime_ns; /* --regimes MS:NS: in every other MS ms, each launch spins NS
                             * ns more (wall and CPU time alike): a CPU whose speed changes under
                             * a busy thread, in regimes of seconds on the H200 VMs */
static long g_end_ms;       /* --end-ms: CPU work with no launch after the loop, timed by the
                             * wall clock (a Python process's finalization) */
static long g_phase_ms;     /* --phases MS:API: in every other MS ms, launch through API (its own
                             * kernel) instead of --api: a job that runs other code in turns */
static const char *g_phase_api = "";
static long g_phase_every = 1; /* --phases MS:API:EVERY: in those turns, only every EVERY-th launch
                             * goes through API: with 2, the launch functions' shares move by half,
                             * as eager code's against an MLP's (Linear + GELU) on an H200 */

static long g_client_at_ms = -1, g_client_hold_ms; /* --cupti-client (below) */
static void cupti_client_tick(double t0);

/* --api cuLaunchKernel-table: the driver's cuLaunchKernel called through a pointer
 * that dlsym gave and a writable variable holds, as Triton's launchers and ATen's
 * NVRTC table (torch.compile's static launcher) do: no import slot of the caller's. */
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
static launch_fn g_table_launch;
/* The driver's own pointer to a function, as cuBLAS's static cudart takes it (from
 * cuGetProcAddress, which the launch counter does not answer): dlsym's RTLD_DEFAULT,
 * which it leaves alone (it answers lookups by a handle: --table-lazy). */
static void *driver_fn(const char *name) { return dlsym(RTLD_DEFAULT, name); }
/* --table-after-ms M: the table holds a lazy stub of ours for the loop's first M ms,
 * which launches through its own copy of the pointer, on the heap (where the counter
 * does not look), then the driver's pointer (ATen's LazyNVRTC puts it in its table at
 * the first call). */
static long g_table_after_ms;
/* --table-every K: only every K-th launch goes through the table, the others through
 * cuLaunchKernel's import slot (counted from the start): the counter sees part of the
 * launches, then, once the table holds the driver's pointer, all of them (an H200
 * Llama decode's first generate: cuBLAS's table filled then) */
static long g_table_every = 1;
static launch_fn *g_table_real;
static double g_table_t0;
static CUresult table_stub(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                           unsigned bz, unsigned sh, CUstream s, void **args, void **extra)
{
    if ((now_s() - g_table_t0) * 1e3 >= (double)g_table_after_ms)
        __atomic_store_n(&g_table_launch, *g_table_real, __ATOMIC_RELEASE);
    return (*g_table_real)(f, gx, gy, gz, bx, by, bz, sh, s, args, extra);
}

/* --table-lazy 1: the table holds a lazy stub until the loop's first launch through it,
 * which asks dlsym (the workload's own import of it) for the driver's cuLaunchKernel
 * and puts the answer in the table: ATen's LazyNVRTC at torch.compile's first launch,
 * which comes after the compile, long after the attach. */
static int g_table_lazy;
static CUresult table_lazy_stub(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned sh, CUstream s, void **args, void **extra)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    launch_fn p = h ? (launch_fn)dlsym(h, "cuLaunchKernel") : NULL;
    if (!p) {
        fprintf(stderr, "mock_workload: no cuLaunchKernel in libcuda.so.1\n");
        exit(1);
    }
    __atomic_store_n(&g_table_launch, p, __ATOMIC_RELEASE);
    return p(f, gx, gy, gz, bx, by, bz, sh, s, args, extra);
}

/* --busy-first-ms M: the thread spins M ms before the loop, launching nothing (a
 * compile's CPU time: the busy clock takes it for launching). */
static long g_busy_first_ms;

/* --table-fn cuLaunchKernelEx: the table holds the driver's cuLaunchKernelEx (cuBLAS's does), another
 * counted function than the cuLaunchKernel that the other launches' import slot calls:
 * the hits' mix of functions tells what share of the launches they stood for. */
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
static int g_table_ex;
static launch_ex_fn g_table_ex_launch, *g_table_ex_real;
static CUresult table_ex_stub(const CUlaunchConfig *c, CUfunction f, void **args, void **extra)
{
    if ((now_s() - g_table_t0) * 1e3 >= (double)g_table_after_ms)
        __atomic_store_n(&g_table_ex_launch, *g_table_ex_real, __ATOMIC_RELEASE);
    return (*g_table_ex_real)(c, f, args, extra);
}

static CUresult table_launch(CUfunction f, struct tctx *t)
{
    if (!g_table_ex) return g_table_launch(f, 4, 1, 1, 128, 1, 1, 0, t->s, t->args, NULL);
    CUlaunchConfig c;
    memset(&c, 0, sizeof c);
    c.gridDimX = 4, c.gridDimY = c.gridDimZ = 1, c.blockDimX = 128, c.blockDimY = c.blockDimZ = 1, c.hStream = t->s;
    return g_table_ex_launch(&c, f, t->args, NULL);
}

/* --warm-until-counted: the warm-up (--warm-rate) lasts until the launch counter holds
 * the table's word (the shim wrote its trampoline there), and the loop then goes flat
 * out: a period that the counter's growth parts into a slow side and a fast one (an H200
 * Llama's first generate, whose slow start and cuBLAS's table came together). The
 * warm-up's waits spin: the thread is as busy as in the loop (the first generate's
 * loads keep it busy), so the busy clock cannot tell the slow side either. */
static int g_warm_until_counted;
static int table_counted(void)
{
    if (g_table_ex) {
        launch_ex_fn p = __atomic_load_n(&g_table_ex_launch, __ATOMIC_ACQUIRE);
        return p != table_ex_stub && p != *g_table_ex_real;
    }
    launch_fn p = __atomic_load_n(&g_table_launch, __ATOMIC_ACQUIRE);
    return p != table_stub && p != table_lazy_stub && p != *g_table_real;
}

/* --libs-after-ms M1,M2: two launches in three go through libmock_launcher1.so and
 * libmock_launcher2.so (their import slots of cuLaunchKernelEx), which the loop loads M1
 * and M2 ms after its start; before a load, through the driver's pointer held on the
 * heap (not counted). Each load grows the launch counter at the next poll: two loads a
 * period apart grow it in two periods in a row. With --warm-until-counted the warm-up
 * ends at the first load. */
typedef CUresult (*lib_launch_fn)(CUfunction, CUstream, void **);
static long g_lib_ms[2] = {-1, -1};
static lib_launch_fn g_lib_launch[2];
static launch_ex_fn *g_lib_before;
static double g_lib_t0;

static CUresult lib_launch(CUfunction f, struct tctx *t, int which)
{
    if (!g_lib_launch[which] && (now_s() - g_lib_t0) * 1e3 >= (double)g_lib_ms[which]) {
        void *h = dlopen(which ? "libmock_launcher2.so" : "libmock_launcher1.so", RTLD_NOW | RTLD_LOCAL);
        g_lib_launch[which] = h ? (lib_launch_fn)dlsym(h, "mock_launcher_launch") : NULL;
        if (!g_lib_launch[which]) {
            fprintf(stderr, "mock_workload: libmock_launcher%d.so: %s\n", which + 1, dlerror());
            exit(1);
        }
    }
    if (g_lib_launch[which]) return g_lib_launch[which](f, t->s, t->args);
    CUlaunchConfig c;
    memset(&c, 0, sizeof c);
    c.gridDimX = 4, c.gridDimY = c.gridDimZ = 1, c.blockDimX = 128, c.blockDimY = c.blockDimZ = 1, c.hStream = t->s;
    return (*g_lib_before)(&c, f, t->args, NULL);
}

static int bench(long n, const char *api, double rate, long warm, double warm_rate)
{
    struct tctx t;
    memset(&t, 0, sizeof t);
    ck_cu(cuStreamCreate(&t.s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    t.args[0] = &t.buf;
    t.args[1] = &t.n;
    int rt = !strcmp(api, "cudaLaunchKernel"), graph = !strcmp(api, "cuGraphLaunch");
    int table = !strcmp(api, "cuLaunchKernel-table");
    /* --phases: the other turns' path (cudaLaunchKernel or cuLaunchKernel) */
    int alt_rt = !strcmp(g_phase_api, "cudaLaunchKernel");
    if (g_phase_ms > 0 && (graph || table || (!alt_rt && strcmp(g_phase_api, "cuLaunchKernel")))) {
        fprintf(stderr, "mock_workload: --phases takes cudaLaunchKernel or cuLaunchKernel, beside --api "
                        "cudaLaunchKernel or cuLaunchKernel\n");
        return 1;
    }
    if (!rt && !graph && !table && strcmp(api, "cuLaunchKernel")) {
        fprintf(stderr, "mock_workload: --api must be cuLaunchKernel, cudaLaunchKernel, cuGraphLaunch or "
                        "cuLaunchKernel-table\n");
        return 1;
    }
    if (table) {
        g_table_real = malloc(sizeof *g_table_real);
        *(void **)g_table_real = driver_fn("cuLaunchKernel");
        if (!*g_table_real) {
            fprintf(stderr, "mock_workload: no cuLaunchKernel in libcuda.so.1\n");
            return 1;
        }
        g_table_launch = g_table_lazy ? table_lazy_stub : g_table_after_ms > 0 ? table_stub : *g_table_real;
        g_table_ex_real = malloc(sizeof *g_table_ex_real);
        *(void **)g_table_ex_real = driver_fn("cuLaunchKernelEx");
        if (g_table_ex && !*g_table_ex_real) {
            fprintf(stderr, "mock_workload: no cuLaunchKernelEx in libcuda.so.1\n");
            return 1;
        }
        g_table_ex_launch = g_table_after_ms > 0 ? table_ex_stub : *g_table_ex_real;
        g_table_t0 = now_s();
    }
    int libs = g_lib_ms[0] >= 0;
    if (libs) {
        g_lib_before = malloc(sizeof *g_lib_before);
        *(void **)g_lib_before = driver_fn("cuLaunchKernelEx");
        if (table || graph || rt || !*g_lib_before) {
            fprintf(stderr, "mock_workload: --libs-after-ms takes --api cuLaunchKernel\n");
            return 1;
        }
        g_lib_t0 = now_s();
    }
    if (graph) capture_cuGraphLaunch(&t); /* each launch: a replay of its 3 nodes */
    CUfunction f = g_fn[K_cuLaunchKernel];
    ck_rt(cudaLaunchKernel((const void *)stub_cudaLaunchKernel, GRID, BLOCK, t.args, 0, (cudaStream_t)t.s), "warmup");
    if (g_idle_first_ms > 0) {
        struct timespec ts = {(time_t)(g_idle_first_ms / 1000), (g_idle_first_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (g_busy_first_ms > 0) {
        double until = now_s() + (double)g_busy_first_ms / 1e3;
        while (now_s() < until) {
        }
    }
    double t0 = now_s(), c0 = thread_cpu_s();
    double gaps_s = 0, next_gap_s = g_gap_every_ms / 1e3;
    const char *trace_path = getenv("MOCK_LAUNCH_TRACE");
    FILE *trace = trace_path ? fopen(trace_path, "w") : NULL;
    const char *every_env = getenv("MOCK_LAUNCH_TRACE_EVERY");
    long trace_every = every_env && atol(every_env) > 0 ? atol(every_env) : 1000;
    if (trace) fprintf(trace, "%.6f 0\n", t0);
    long turn = 0; /* --phases: the turn the last launch was in (odd: the other path) */
    for (long i = 0; i < n; i++) {
        int alt = 0;
        if (g_warm_until_counted && i < warm && (table ? table_counted() : libs && g_lib_launch[0] != NULL)) {
            warm = i; /* the warm-up ends at this launch, and the trace says so */
            if (trace) fprintf(trace, "%.6f %ld\n", now_s(), i);
        }
        if (g_phase_ms > 0) {
            long now_turn = (long)((now_s() - t0) * 1e3 / (double)g_phase_ms);
            if (now_turn != turn && trace) fprintf(trace, "%.6f %ld\n", now_s(), i); /* a line at each turn */
            turn = now_turn, alt = (int)(turn % 2) && i % g_phase_every == 0;
        }
        if (alt ? alt_rt : rt)
            ck_rt(cudaLaunchKernel((const void *)stub_cudaLaunchKernel, GRID, BLOCK, t.args, 0, (cudaStream_t)t.s),
                  "cudaLaunchKernel");
        else if (graph)
            launch_cuGraphLaunch(&t);
        else if (alt)
            ck_cu(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, t.s, t.args, NULL), "cuLaunchKernel");
        else if (libs && i % 3 < 2)
            ck_cu(lib_launch(f, &t, (int)(i % 3)), "cuLaunchKernelEx (library)");
        else if (table && i % g_table_every == 0)
            ck_cu(table_launch(f, &t), "cuLaunchKernel (table)");
        else
            ck_cu(cuLaunchKernel(f, 4, 1, 1, 128, 1, 1, 0, t.s, t.args, NULL), "cuLaunchKernel");
        if (g_client_at_ms >= 0 && i % 64 == 0) cupti_client_tick(t0);
        if (g_work_ns > 0) {
            double until = thread_cpu_s() + (double)g_work_ns * 1e-9;
            while (thread_cpu_s() < until) {
            }
        }
        long spin = g_spin_ns;
        if (g_regime_ms > 0 && (long)((now_s() - t0) * 1e3 / (double)g_regime_ms) % 2) spin += g_regime_ns;
        if (spin > 0) {
            double until = now_s() + (double)spin * 1e-9;
            while (now_s() < until) {
            }
        }
        if (trace && (i + 1) % trace_every == 0) fprintf(trace, "%.6f %ld\n", now_s(), i + 1);
        int warming = i < warm && warm_rate > 0;
        if (g_gap_ms > 0 && i % 1000 == 999 && now_s() - t0 >= next_gap_s) {
            long gap_ns = (long)(g_gap_ms * 1e6);
            struct timespec ts = {(time_t)(gap_ns / 1000000000L), gap_ns % 1000000000L};
            nanosleep(&ts, NULL);
            if (trace) fprintf(trace, "%.6f %ld\n", now_s(), i + 1); /* no launch in the gap */
            gaps_s += g_gap_ms / 1e3;
            next_gap_s = now_s() - t0 + g_gap_every_ms / 1e3;
        }
        if ((rate > 0 || warming) && (i + 1) % g_block == 0) {
            double due = gaps_s + (warming ? (double)(i + 1) / warm_rate
                                   : (warm > 0 && warm_rate > 0 ? (double)warm / warm_rate : 0) +
                                         (double)(i + 1 - (warm_rate > 0 ? warm : 0)) / rate);
            double ahead = due - (now_s() - t0);
            if (ahead > 0 && warming && g_warm_until_counted) { /* busy, as a first generate's loads */
                for (double until = now_s() + ahead; now_s() < until;) {
                }
            } else if (ahead > 0) {
                struct timespec ts = {(time_t)ahead, (long)((ahead - (double)(time_t)ahead) * 1e9)};
                nanosleep(&ts, NULL);
            }
        }
    }
    double dt = now_s() - t0, dc = thread_cpu_s() - c0;
    if (trace) {
        fprintf(trace, "%.6f %ld\n", now_s(), n);
        fclose(trace);
    }
    ck_cu(cuStreamSynchronize(t.s), "cuStreamSynchronize");
    for (double end = now_s() + (double)g_end_ms / 1e3; now_s() < end;) {
    }
    printf("ns_per_launch=%.2f cpu_ns_per_launch=%.2f launches_per_s=%.0f\n", n ? dt * 1e9 / (double)n : 0.0,
           n ? dc * 1e9 / (double)n : 0.0, dt > 0 ? (double)n / dt : 0.0);
    return 0;
}

/* --cupti-client: another CUPTI client, named "test-profiler", on the launching
 * thread (torch.profiler starts on the thread that launches), ticked between
 * launches: from AT_MS on it tries cuptiSubscribe_v2 every ms until CUPTI is free
 * (between two of the shim's windows), holds it HOLD_MS, and unsubscribes. */
static void noop_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data)
{
    (void)u, (void)d, (void)id, (void)data;
}

static void cupti_client_tick(double t0)
{
    static int state; /* 0: waiting, 1: trying, 2: holding, 3: done */
    static double next, held_at;
    static CUpti_SubscriberHandle s;
    static CUptiResult (*sub)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *, CUpti_SubscriberParams *);
    static CUptiResult (*unsub)(CUpti_SubscriberHandle);
    double now = now_s() - t0;
    if (g_client_at_ms < 0 || state == 3 || now < next) return;
    next = now + 1e-3;
    if (state == 0 && now >= g_client_at_ms / 1e3) {
        void *h = dlopen("libcupti.so.13", RTLD_NOW);
        *(void **)&sub = h ? dlsym(h, "cuptiSubscribe_v2") : NULL;
        *(void **)&unsub = h ? dlsym(h, "cuptiUnsubscribe") : NULL;
        if (!sub || !unsub) {
            fprintf(stderr, "mock_workload: --cupti-client: no libcupti\n");
            state = 3;
            return;
        }
        state = 1;
    }
    if (state == 1) {
        CUpti_SubscriberParams p = {.structSize = CUpti_SubscriberParams_STRUCT_SIZE, .subscriberName = "test-profiler"};
        if (sub(&s, noop_callback, NULL, &p) != CUPTI_SUCCESS) return;
        fprintf(stderr, "cupti-client: subscribed %.0f ms in\n", now * 1e3);
        held_at = now, state = 2;
    } else if (state == 2 && now >= held_at + g_client_hold_ms / 1e3) {
        unsub(s);
        fprintf(stderr, "cupti-client: released\n");
        state = 3;
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: mock_workload [--paths all|p1,p2,...] [--iters N] [--sleep-ms M] [--duration S]\n"
                    "                     [--threads T] [--list-paths]\n"
                    "       mock_workload --bench N [--api cuLaunchKernel|cudaLaunchKernel|cuGraphLaunch|\n"
                    "                     cuLaunchKernel-table] [--rate R]\n"
                    "                     [--warm N --warm-rate R] [--gap-ms G --gap-every-ms E] [--block B] [--spin-ns S]\n"
                    "                     [--work-ns S] [--idle-first-ms M] [--regimes MS:NS] [--end-ms M]\n"
                    "                     [--table-after-ms M] [--table-every K] [--phases MS:API[:EVERY]]\n"
                    "                     [--table-fn cuLaunchKernel|cuLaunchKernelEx] [--warm-until-counted 1]\n"
                    "                     [--libs-after-ms M1,M2] [--table-lazy 1] [--busy-first-ms M]\n"
                    "                     [--cupti-client AT_MS:HOLD_MS]\n");
    exit(1);
}

int main(int argc, char **argv)
{
    signal(SIGUSR1, on_usr1);
    const char *spec = "all", *api = "cuLaunchKernel";
    long threads = 1, bench_n = -1, warm = 0;
    double rate = 0, warm_rate = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--list-paths")) {
            for (size_t j = 0; j < NLISTED; j++) puts(paths[j].name);
            return 0;
        }
        if (!v) usage();
        if (!strcmp(a, "--paths")) spec = v;
        else if (!strcmp(a, "--iters")) g_iters = atol(v);
        else if (!strcmp(a, "--sleep-ms")) g_sleep_ms = atol(v);
        else if (!strcmp(a, "--duration")) g_duration = atof(v);
        else if (!strcmp(a, "--threads")) threads = atol(v);
        else if (!strcmp(a, "--bench")) bench_n = atol(v);
        else if (!strcmp(a, "--api")) api = v;
        else if (!strcmp(a, "--rate")) rate = atof(v);
        else if (!strcmp(a, "--warm")) warm = atol(v);
        else if (!strcmp(a, "--warm-rate")) warm_rate = atof(v);
        else if (!strcmp(a, "--gap-ms")) g_gap_ms = atof(v);
        else if (!strcmp(a, "--gap-every-ms")) g_gap_every_ms = atof(v);
        else if (!strcmp(a, "--block")) g_block = atol(v);
        else if (!strcmp(a, "--spin-ns")) g_spin_ns = atol(v);
        else if (!strcmp(a, "--work-ns")) g_work_ns = atol(v);
        else if (!strcmp(a, "--idle-first-ms")) g_idle_first_ms = atol(v);
        else if (!strcmp(a, "--end-ms")) g_end_ms = atol(v);
        else if (!strcmp(a, "--table-after-ms")) g_table_after_ms = atol(v);
        else if (!strcmp(a, "--table-lazy")) g_table_lazy = atol(v) != 0;
        else if (!strcmp(a, "--busy-first-ms")) g_busy_first_ms = atol(v);
        else if (!strcmp(a, "--table-every")) g_table_every = atol(v) > 1 ? atol(v) : 1;
        else if (!strcmp(a, "--libs-after-ms")) {
            if (sscanf(v, "%ld,%ld", &g_lib_ms[0], &g_lib_ms[1]) != 2 || g_lib_ms[0] < 0 || g_lib_ms[1] < 0) usage();
        }
        else if (!strcmp(a, "--warm-until-counted")) g_warm_until_counted = atol(v) != 0;
        else if (!strcmp(a, "--table-fn")) {
            if (strcmp(v, "cuLaunchKernel") && strcmp(v, "cuLaunchKernelEx")) usage();
            g_table_ex = !strcmp(v, "cuLaunchKernelEx");
        }
        else if (!strcmp(a, "--phases")) {
            g_phase_ms = atol(v);
            const char *c = strchr(v, ':');
            static char phase_api[32];
            snprintf(phase_api, sizeof phase_api, "%s", c ? c + 1 : "");
            char *every = strchr(phase_api, ':');
            if (every) *every = 0, g_phase_every = atol(every + 1);
            g_phase_api = phase_api;
            if (g_phase_ms <= 0 || !c || g_phase_every < 1) usage();
        }
        else if (!strcmp(a, "--regimes")) {
            if (sscanf(v, "%ld:%ld", &g_regime_ms, &g_regime_ns) != 2 || g_regime_ms <= 0 || g_regime_ns < 0) usage();
        }
        else if (!strcmp(a, "--cupti-client")) {
            if (sscanf(v, "%ld:%ld", &g_client_at_ms, &g_client_hold_ms) != 2 || g_client_at_ms < 0) usage();
        } else usage();
        i++;
    }
    if (threads < 1 || g_iters < 0 || g_block < 1) usage();
    select_paths(spec);

    int ndev = 0;
    CUdevice dev;
    char name[128];
    ck_cu(cuInit(0), "cuInit");
    ck_cu(cuDeviceGetCount(&ndev), "cuDeviceGetCount");
    if (ndev < 1) { fprintf(stderr, "mock_workload: no device\n"); return 1; }
    ck_cu(cuDeviceGet(&dev, 0), "cuDeviceGet");
    ck_cu(cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
    ck_cu(cuCtxCreate(&g_ctx, NULL, 0, dev), "cuCtxCreate");
    ck_rt(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
    load_driver_module();

    if (bench_n >= 0) return bench(bench_n, api, rate, warm, warm_rate);

    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    for (long i = 0; i < threads; i++)
        if (pthread_create(&tids[i], NULL, thread_main, NULL)) { fprintf(stderr, "mock_workload: pthread_create\n"); return 1; }
    for (long i = 0; i < threads; i++) pthread_join(tids[i], NULL);
    free(tids);
    ck_cu(cuCtxSynchronize(), "cuCtxSynchronize");
    printf("mock_workload: ok (%s, %ld thread(s), device \"%s\")\n", spec, threads, name);
    return 0;
}
