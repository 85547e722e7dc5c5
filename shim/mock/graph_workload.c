/*
 * graph_workload: CUDA graph scenarios for the capture-attribution tests
 * (tests/test_graphs.py), on the mock CUDA stack.
 *
 * One stream capture in build_graph() calls two distinctly named functions:
 * capture_attention() launches k_attn_scores and k_attn_softmax,
 * capture_mlp() launches k_mlp_up and k_mlp_down. The graph is instantiated in
 * instantiate_graph() and replayed from replay_graph().
 *
 *   graph_workload [--replays N] [--execs K] [--reinstantiate] [--add-nodes]
 *                  [--wait-attach] [--churn N [--sleep-us U]] [--linger-ms M]
 *
 *   --replays N      replays per exec graph (default 100)
 *   --execs K        instantiate the graph K times (K exec graphs), replay each
 *   --reinstantiate  then destroy the exec graphs, instantiate again, replay again
 *   --wait-attach    capture and instantiate first, print "captured", wait until
 *                    an agent has attached the shim (gpu_agent_shim_state() == 1),
 *                    then replay; then capture a second graph in capture_late()
 *                    (k_late) and replay it too
 *   --churn N        N times: capture (capture_attention), instantiate, replay
 *                    once, destroy exec and graph; prints "rss_kb <iter> <kB>" at
 *                    every N/10 rounds; --sleep-us U pauses U us after each round
 *   --add-nodes      build the graph with cuGraphCreate + cuGraphAddKernelNode
 *                    instead: add_attention_nodes() adds k_attn_scores and
 *                    k_attn_softmax, add_mlp_nodes() k_mlp_up and k_mlp_down
 *   --linger-ms M    sleep M ms before exiting (lets the shim's poller run)
 * At the end prints "shim <name>=<value> ..." from gpu_agent_shim_counter().
 *
 * Built like mock_workload (-O1 -fno-inline -fomit-frame-pointer -rdynamic).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "gpu_agent_shim.h" /* the shim's counter ids */

#define NOINLINE __attribute__((noinline))

enum { K_ATTN_SCORES, K_ATTN_SOFTMAX, K_MLP_UP, K_MLP_DOWN, K_LATE, NK };
static const char *const k_names[NK] = {
    "_Z13k_attn_scoresPfi", "_Z14k_attn_softmaxPfi", "_Z8k_mlp_upPfi", "_Z10k_mlp_downPfi",
    "_Z6k_latePfi",
};
static const int k_ns[NK] = {31000, 17000, 43000, 29000, 11000};
static CUfunction g_fn[NK];
static CUstream g_s;
static float *g_buf;
static int g_n = 1024;
static void *g_args[2] = {&g_buf, &g_n};

static void ck(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return;
    const char *s = NULL;
    cuGetErrorString(r, &s);
    fprintf(stderr, "graph_workload: %s failed: %d (%s)\n", what, (int)r, s ? s : "?");
    exit(1);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Each launch checks its result afterwards: never a tail call, so the
 * calling function stays on the unwound stack. */
static void launch_kernel(int k) { ck(cuLaunchKernel(g_fn[k], 4, 1, 1, 128, 1, 1, 0, g_s, g_args, NULL), "cuLaunchKernel"); }

NOINLINE void capture_attention(void)
{
    launch_kernel(K_ATTN_SCORES);
    launch_kernel(K_ATTN_SOFTMAX);
}

NOINLINE void capture_mlp(void)
{
    launch_kernel(K_MLP_UP);
    launch_kernel(K_MLP_DOWN);
}

NOINLINE void capture_late(void) { launch_kernel(K_LATE); }

NOINLINE CUgraph build_graph(void (*a)(void), void (*b)(void))
{
    CUgraph g;
    ck(cuStreamBeginCapture(g_s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    a();
    if (b) b();
    ck(cuStreamEndCapture(g_s, &g), "cuStreamEndCapture");
    return g;
}

static void add_node(CUgraph g, int k)
{
    CUgraphNode n;
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = g_fn[k];
    p.gridDimX = 4, p.gridDimY = 1, p.gridDimZ = 1;
    p.blockDimX = 128, p.blockDimY = 1, p.blockDimZ = 1;
    p.kernelParams = g_args;
    ck(cuGraphAddKernelNode(&n, g, NULL, 0, &p), "cuGraphAddKernelNode");
}

NOINLINE void add_attention_nodes(CUgraph g)
{
    add_node(g, K_ATTN_SCORES);
    add_node(g, K_ATTN_SOFTMAX);
}

NOINLINE void add_mlp_nodes(CUgraph g)
{
    add_node(g, K_MLP_UP);
    add_node(g, K_MLP_DOWN);
}

NOINLINE CUgraph build_graph_explicit(void)
{
    CUgraph g;
    ck(cuGraphCreate(&g, 0), "cuGraphCreate");
    add_attention_nodes(g);
    add_mlp_nodes(g);
    return g;
}

NOINLINE CUgraphExec instantiate_graph(CUgraph g)
{
    CUgraphExec x;
    ck(cuGraphInstantiateWithFlags(&x, g, 0), "cuGraphInstantiateWithFlags");
    return x;
}

NOINLINE void replay_graph(CUgraphExec x, long n)
{
    for (long i = 0; i < n; i++) ck(cuGraphLaunch(x, g_s), "cuGraphLaunch");
    ck(cuStreamSynchronize(g_s), "cuStreamSynchronize");
}

static long rss_kb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static long g_sleep_us;

NOINLINE void churn(long n)
{
    for (long i = 1; i <= n; i++) {
        CUgraph g = build_graph(capture_attention, NULL);
        CUgraphExec x = instantiate_graph(g);
        replay_graph(x, 1);
        ck(cuGraphExecDestroy(x), "cuGraphExecDestroy");
        ck(cuGraphDestroy(g), "cuGraphDestroy");
        if (g_sleep_us) {
            struct timespec ts = {0, g_sleep_us * 1000L};
            nanosleep(&ts, NULL);
        }
        if (n >= 10 && i % (n / 10) == 0) printf("rss_kb %ld %ld\n", i, rss_kb());
    }
}

static int shim_state(void)
{
    int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gpu_agent_shim_state");
    return f ? f() : -2;
}

static void print_shim_counters(void)
{
    uint64_t (*f)(int) = (uint64_t(*)(int))dlsym(RTLD_DEFAULT, "gpu_agent_shim_counter");
    if (!f) return;
    printf("shim node_stacks=%llu clones=%llu destroyed=%llu execs=%llu exec_nodes=%llu "
           "destroy_queue=%llu activity_buffers=%llu\n",
           (unsigned long long)f(GA_SC_NODE_STACKS), (unsigned long long)f(GA_SC_CLONES),
           (unsigned long long)f(GA_SC_NODES_DESTROYED), (unsigned long long)f(GA_SC_EXECS),
           (unsigned long long)f(GA_SC_EXEC_NODES), (unsigned long long)f(GA_SC_DESTROY_QUEUE),
           (unsigned long long)f(GA_SC_BUFFERS));
}

static void usage(void)
{
    fprintf(stderr, "usage: graph_workload [--replays N] [--execs K] [--reinstantiate] [--wait-attach] [--add-nodes]\n"
                    "                      [--churn N [--sleep-us U]] [--linger-ms M]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long replays = 100, execs = 1, churn_n = 0, linger_ms = 0;
    int reinst = 0, wait_attach = 0, add_nodes = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--reinstantiate")) { reinst = 1; continue; }
        if (!strcmp(a, "--wait-attach")) { wait_attach = 1; continue; }
        if (!strcmp(a, "--add-nodes")) { add_nodes = 1; continue; }
        if (i + 1 >= argc) usage();
        long v = atol(argv[++i]);
        if (!strcmp(a, "--replays")) replays = v;
        else if (!strcmp(a, "--execs")) execs = v;
        else if (!strcmp(a, "--churn")) churn_n = v;
        else if (!strcmp(a, "--linger-ms")) linger_ms = v;
        else if (!strcmp(a, "--sleep-us")) g_sleep_us = v;
        else usage();
    }
    if (execs < 1 || execs > 16) usage();
    setvbuf(stdout, NULL, _IOLBF, 0);

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    ck(cuInit(0), "cuInit");
    ck(cuDeviceGet(&dev, 0), "cuDeviceGet");
    ck(cuCtxCreate(&ctx, NULL, 0, dev), "cuCtxCreate");
    char img[512];
    size_t len = 0;
    for (int k = 0; k < NK; k++) len += (size_t)snprintf(img + len, sizeof img - len, "%s=%d\n", k_names[k], k_ns[k]);
    ck(cuModuleLoadData(&mod, img), "cuModuleLoadData");
    for (int k = 0; k < NK; k++) ck(cuModuleGetFunction(&g_fn[k], mod, k_names[k]), "cuModuleGetFunction");
    ck(cuStreamCreate(&g_s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    ck(cuMemAlloc((CUdeviceptr *)&g_buf, 4096), "cuMemAlloc");

    if (churn_n > 0) {
        churn(churn_n);
    } else {
        CUgraph g = add_nodes ? build_graph_explicit() : build_graph(capture_attention, capture_mlp);
        CUgraphExec x[16];
        for (long e = 0; e < execs; e++) x[e] = instantiate_graph(g);
        if (wait_attach) {
            printf("captured\n");
            for (int i = 0; i < 600 && shim_state() != 1; i++) sleep_ms(100);
            if (shim_state() != 1) { fprintf(stderr, "graph_workload: no agent attached\n"); return 3; }
        }
        for (long e = 0; e < execs; e++) replay_graph(x[e], replays);
        if (reinst) {
            for (long e = 0; e < execs; e++) ck(cuGraphExecDestroy(x[e]), "cuGraphExecDestroy");
            for (long e = 0; e < execs; e++) x[e] = instantiate_graph(g);
            for (long e = 0; e < execs; e++) replay_graph(x[e], replays);
        }
        if (wait_attach) {
            CUgraph gl = build_graph(capture_late, NULL);
            CUgraphExec xl = instantiate_graph(gl);
            replay_graph(xl, replays);
            ck(cuGraphExecDestroy(xl), "cuGraphExecDestroy");
            ck(cuGraphDestroy(gl), "cuGraphDestroy");
        }
        for (long e = 0; e < execs; e++) ck(cuGraphExecDestroy(x[e]), "cuGraphExecDestroy");
        ck(cuGraphDestroy(g), "cuGraphDestroy");
    }
    if (linger_ms) sleep_ms(linger_ms);
    print_shim_counters();
    printf("graph_workload: ok\n");
    return 0;
}
