/*
 * Private interface between the three mock libraries (libcuda.so.1,
 * libcudart.so.13, libcupti.so.13).  Nothing here is part of the CUDA API;
 * every exported symbol carries the mockcuda_ prefix.
 *
 * Ownership: libcuda owns all objects (contexts, streams, modules, functions,
 * graphs), the global correlation counter, the per-thread "outer correlation
 * id" that a runtime call hands down to the driver calls it makes, and the
 * callback gate.  libcupti registers a hook table and flips gate bytes;
 * libcudart uses the API-scope helpers to bracket its own calls.
 */
#ifndef MOCK_INTERNAL_H
#define MOCK_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include <stdatomic.h>
#include <pthread.h>
#include <time.h>
#include <cuda.h>
#include <cupti_callbacks.h>

#define MOCK_MAX_CBID 1024   /* > CUPTI_DRIVER_TRACE_CBID_SIZE and RUNTIME size */
#define MOCK_CTX_MAGIC    0x4d435458u  /* 'MCTX' */
#define MOCK_STREAM_MAGIC 0x4d535452u
#define MOCK_FUNC_MAGIC   0x4d46554eu
#define MOCK_MOD_MAGIC    0x4d4d4f44u
#define MOCK_GRAPH_MAGIC  0x4d475250u
#define MOCK_NODE_MAGIC   0x4d4e4f44u
#define MOCK_EXEC_MAGIC   0x4d455845u

/* Node ids of captured graphs count from 1, node ids of instantiated
 * (executable) graphs from this base, so the two can never be confused. */
#define MOCK_EXEC_NODE_ID_BASE (1ull << 32)

struct mock_module;

#define MOCK_MAX_PCS 8

struct mock_func {                 /* a CUfunction */
    uint32_t magic;
    char *name;                    /* stable heap copy of the mangled name */
    uint64_t duration_ns;
    /* Where its PC samples land (PC Sampling API): offsets in the function and
     * their weights, from the module image (`name=ns@0x210:6,0x240:3`); none: 0x0. */
    uint32_t npcs;
    uint64_t pc[MOCK_MAX_PCS];
    uint32_t pc_weight[MOCK_MAX_PCS];
    struct mock_module *mod;
    unsigned block[3];             /* cuFuncSetBlockShape, for legacy cuLaunch* */
    unsigned shmem;
    _Atomic uint64_t gt_launches;  /* ground truth, only touched when enabled */
    _Atomic uint64_t gt_ns;
    struct mock_func *next_in_mod;
    struct mock_func *next_all;
};

struct mock_ctx;
struct mock_graph;

/* Kernels a stream holds queued before a launch waits for the oldest to finish,
 * as the real driver's launch queue does: 1 024 on an H100 with CUDA 13
 * (bench/gpu/launch_queue.cu, docs/benchmarks.md). */
#define MOCK_QUEUE_DEPTH 1024

struct mock_stream {               /* a CUstream */
    uint32_t magic;
    uint32_t id;                   /* CUPTI stream id */
    struct mock_ctx *ctx;
    _Atomic uint64_t busy_until;   /* virtual GPU clock of this stream */
    _Atomic uint64_t queued;       /* kernels launched on it, ever */
    _Atomic uint64_t ends[MOCK_QUEUE_DEPTH]; /* end of launch n at [n % depth] */
    struct mock_graph *_Atomic capture; /* non-NULL while capturing */
};

struct mock_ctx {                  /* a CUcontext */
    uint32_t magic;
    uint32_t uid;                  /* CUPTI context id / contextUid */
    CUdevice device;
    struct mock_stream legacy;     /* NULL / CU_STREAM_LEGACY stream */
};

struct mock_node {                 /* a CUgraphNode (captured or executable) */
    uint32_t magic;
    uint64_t id;                   /* cuptiGetGraphNodeId */
    struct mock_graph *graph;      /* owning graph (NULL for exec nodes) */
    struct mock_node *orig;        /* exec node: the captured node it was cloned from */
    struct mock_func *f;
    unsigned grid[3], block[3], shmem;
    uint8_t launch_type;           /* CUpti_ActivityLaunchType */
};

struct mock_graph {                /* a CUgraph */
    uint32_t magic;
    uint32_t id;                   /* cuptiGetGraphId */
    struct mock_ctx *ctx;
    pthread_mutex_t mu;
    struct mock_node **nodes;
    size_t n, cap;
};

struct mock_exec {                 /* a CUgraphExec */
    uint32_t magic;
    uint32_t id;                   /* cuptiGetGraphExecId; shares the graph id space */
    struct mock_ctx *ctx;
    size_t n;
    struct mock_node *nodes;       /* clones, ids from MOCK_EXEC_NODE_ID_BASE */
};

/* One executed kernel, handed to libcupti to become a CUpti_ActivityKernel10. */
struct mock_kernel_exec {
    const struct mock_func *func;
    uint64_t start, end;
    uint32_t device_id, context_id, stream_id, correlation_id;
    uint32_t graph_id;             /* executable graph id, 0 if not a graph launch */
    uint64_t graph_node_id;        /* executable node id, 0 if not a graph launch */
    unsigned grid[3], block[3], shmem;
    uint8_t launch_type;
    uint8_t activity_on;           /* 0: an untraced graph node (gate.graph_nodes) */
};

/* Implemented by libcupti; called by libcuda/libcudart with no lock held. */
struct mock_cupti_hooks {
    /* Only called for (domain, cbid) pairs whose gate byte is set. */
    void (*api)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData *d);
    /* CUPTI_CB_DOMAIN_RESOURCE; called when gate.api[RESOURCE][cbid] is set. */
    void (*resource)(CUpti_CallbackId cbid, const CUpti_ResourceData *d);
    /* Called for every executed kernel while gate.kernel_activity is set, and
     * for every executed graph node while gate.graph_nodes is set. */
    void (*kernel)(const struct mock_kernel_exec *k);
    /* Called for every executed kernel while gate.pc_sampling is set. */
    void (*pc_sample)(const struct mock_func *f, uint64_t duration_ns);
};

/* Gate bytes, exported by libcuda, written by libcupti.  Hot paths test
 * `active` (one load + branch) and do nothing else while it is 0. */
struct mock_cupti_gate {
    volatile uint8_t active;           /* a CUPTI client exists: assign correlation ids */
    volatile uint8_t kernel_activity;  /* KERNEL or CONCURRENT_KERNEL activity enabled */
    volatile uint8_t graph_nodes;      /* graph nodes reach libcupti with activity off too */
    volatile uint8_t pc_sampling;      /* cuptiPCSamplingEnable'd: kernels are sampled */
    volatile uint8_t graph_replayed;   /* a graph was launched while a CUPTI client existed (sticky) */
    volatile uint8_t instrumented;     /* kernel activity was on since the last cuptiFinalize:
                                        * launches pay the residual (MOCK_CUPTI_RESIDUAL_LAUNCH_NS) */
    volatile uint8_t api[CUPTI_CB_DOMAIN_SIZE][MOCK_MAX_CBID];
    volatile int corr_scrambled;  /* kernel records' correlation ids one launch off (mock_cupti.c) */
    volatile int flushing;        /* cuptiActivityFlushAll calls in progress (MOCK_CUDA_REPORT) */
};
extern struct mock_cupti_gate mockcuda_gate;

/* libcupti's PC Sampling API (mock_pcsampling.c): a kernel executed while enabled. */
void mock_pc_sample(const struct mock_func *f, uint64_t duration_ns);
/* What the mock's cuptiGetCubinCrc says of a module's image (libcuda). */
uint64_t mockcuda_module_crc(const struct mock_module *m);
/* libcupti's entry points open with API_GUARD() (mock_cupti.c): a call from
 * another thread while one is inside cuptiFinalize aborts, as it crashes on a GPU. */
int mockcupti_api_enter(const char *fn);
void mockcupti_api_leave(int *unused);
#define API_GUARD() \
    int api_scope_ __attribute__((cleanup(mockcupti_api_leave), unused)) = mockcupti_api_enter(__func__)
/* libcupti's hooks installed in libcuda (mock_cupti.c). */
void mock_ensure_registered(void);

/* Install (or with NULL remove) libcupti's hooks. */
void mockcuda_register_cupti(const struct mock_cupti_hooks *hooks);
/* Restart the correlation id counter (MOCK_CUPTI_CORR_RESTART: ids repeat each time
 * kernel activity is enabled). A model of what the H200 showed under the shim's
 * collection windows (25x too many records joined a sampled launch); the real
 * mechanism was not isolated. */
void mockcuda_restart_correlation_ids(void);

/* API bracket used for every traced call in both libcuda and libcudart.
 * begin: assigns the correlation id (a fresh one, or the enclosing runtime
 * call's), fires API_ENTER if enabled; for RUNTIME_API it also makes its id
 * the one inherited by driver calls made until end.  end: fires API_EXIT. */
struct mock_api_scope {
    CUpti_CallbackData cb;
    uint64_t corr_data;
    int ret;                       /* CUresult or cudaError_t */
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    uint32_t saved_outer;
    uint8_t on;                    /* begin ran (gate was active) */
    uint8_t fire;                  /* callbacks enabled for this pair */
};
void mockcuda_api_begin(struct mock_api_scope *s, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                        const char *name, const void *params, const char *symbol);
void mockcuda_api_end(struct mock_api_scope *s, int ret);

/* Fire a CUPTI_CB_DOMAIN_RESOURCE graph callback (no-op unless enabled). */
void mockcuda_graph_resource(CUpti_CallbackId cbid, struct mock_ctx *ctx, CUgraph graph, CUgraph orig_graph,
                             CUgraphNode node, CUgraphNode orig_node, CUgraphExec exec);

/* Untraced helpers for libcudart (real cudart uses internal driver entry points). */
struct mock_module *mockcuda_module_load(const char *image);       /* text image, may be NULL */
struct mock_func *mockcuda_module_function(struct mock_module *m, const char *name);
CUcontext mockcuda_primary_ctx(CUdevice dev);
CUcontext mockcuda_current_ctx(void);
void mockcuda_set_current_ctx(CUcontext ctx);
/* CUPTI stream id of (ctx, stream); per_thread selects the per-thread default
 * stream for a NULL handle.  Returns 0 for an invalid handle. */
uint32_t mockcuda_stream_id(CUcontext ctx, CUstream stream, int per_thread);

/* The mock's one clock: kernel start/end, cuptiGetTimestamp, record lag. */
static inline uint64_t mock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 32-bit FNV-1a, used for default kernel durations. */
static inline uint32_t mock_fnv1a32(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) { h ^= (uint8_t)*s; h *= 16777619u; }
    return h;
}

#endif
