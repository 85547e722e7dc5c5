/* ga_internal.h: shared declarations of the gpu-agent CUPTI shim. */
#ifndef GA_INTERNAL_H
#define GA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <atomic>

#include <cupti.h>
#include "gpu_agent_probes.h"
#include "gpu_agent_shim.h" /* the counters enum, the tests' C API */

#define GA_HIDDEN __attribute__((visibility("hidden")))
#define GA_EXPORT __attribute__((visibility("default")))
#define GA_LIKELY(x) __builtin_expect(!!(x), 1)
#define GA_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- logging (log.cpp / shim.cpp) ---- */
GA_HIDDEN void ga_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
GA_HIDDEN void ga_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
GA_HIDDEN extern int ga_debug_on;

/* ---- configuration (shim.cpp) ---- */
#define GA_BUF_MAX 1024 /* buffers: the ceiling of GPU_AGENT_BUFFER_POOL_MB */

struct ga_config {
    uint32_t sample_period;       /* GPU_AGENT_SAMPLE_PERIOD, default 64 */
    uint32_t graph_sample_period; /* GPU_AGENT_GRAPH_SAMPLE_PERIOD, default 8 */
    uint32_t poll_ms;             /* GPU_AGENT_POLL_MS, default 100 */
    uint32_t flush_ms;            /* GPU_AGENT_FLUSH_MS, default 1000 */
    uint32_t duty_cycle;          /* GPU_AGENT_DUTY_CYCLE, default 40: one window in N */
    uint32_t window_ms;           /* GPU_AGENT_WINDOW_MS, default 100 */
    uint32_t buffer_pool_mb;      /* GPU_AGENT_BUFFER_POOL_MB, default 64: CUPTI buffers
                                   * (1 MiB each) allocated as load needs, up to this */
    uint32_t pc_sampling;         /* GPU_AGENT_PC_SAMPLING, default 0 (off) */
    uint32_t pc_period;           /* GPU_AGENT_PC_SAMPLING_PERIOD: 2^N cycles (5..31), default
                                   * 16 (docs/benchmarks.md: the cost falls with it); 0: CUPTI's
                                   * own (2^11 on an H100) */
    uint32_t pc_cubin_mb;         /* GPU_AGENT_PC_CUBIN_MB, default 256: cubins kept */
    uint32_t pc_every;            /* GPU_AGENT_PC_SAMPLING_EVERY, default 1: sample in one
                                   * collection window of every this many */
    uint32_t teardown;            /* GPU_AGENT_TEARDOWN, default 1: finalize CUPTI after every
                                   * window and at detach (teardown.cpp); 0: never */
    uint32_t launch_counter;      /* GPU_AGENT_LAUNCH_COUNTER, default 1: count launches between
                                   * windows through the launch functions' import slots
                                   * (launch_hook.cpp); 0: extrapolate on the clocks alone */
    uint32_t mix_cuts;            /* GPU_AGENT_MIX_CUTS, default 1: a period ends where the
                                   * launch counter's mix changes (mix.cpp); 0: never */
    uint32_t budget_bp;           /* GPU_AGENT_OVERHEAD_BUDGET (percent of the process's time)
                                   * in basis points, default 200 (2 %): budget.cpp */
    uint32_t fixed_schedule;      /* GPU_AGENT_DUTY_CYCLE or GPU_AGENT_WINDOW_MS given: the
                                   * windows follow them, not the budget */
};
GA_HIDDEN extern ga_config ga_cfg;

/* A setuid/setgid or otherwise privileged exec (AT_SECURE): the shim then takes
 * no file path from the environment (GPU_AGENT_AUDIT_FILE, GPU_AGENT_CUPTI_PATH),
 * which another user could set to make the process write or load a file. */
GA_HIDDEN bool ga_secure_exec(void) noexcept;
/* config.cpp: ga_cfg from the environment, once; bench (GA_BENCH_READ_CONFIG) reads
 * the benchmark build's settings into the same line of invalid values */
GA_HIDDEN void ga_read_config(void (*bench)(char *bad, size_t bad_size) noexcept) noexcept;

/* CLOCK_MONOTONIC in ns: the shim's one clock for schedules and timings. */
/* splitmix64's step: schedules' and weights' draws. */
static inline uint64_t ga_splitmix64(uint64_t *s) noexcept {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A 64-bit mix (murmur3's finalizer half) for open-addressed tables. */
static inline uint64_t ga_mix64(uint64_t x) noexcept {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* murmur3's whole 64-bit finalizer: sampling keys, seeds and stack hashes. */
static inline uint64_t ga_fmix64(uint64_t x) noexcept {
    x = ga_mix64(x);
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t ga_now_ns(void) noexcept {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- attach semaphore (attach_probe.cpp) ---- */
GA_HIDDEN unsigned ga_semaphore_value(void) noexcept;
GA_HIDDEN void ga_fire_attach_probe(void) noexcept;
GA_HIDDEN unsigned ga_replay_semaphore_value(void) noexcept;
GA_HIDDEN void ga_fire_replay_probe(void) noexcept;

/* ---- CUPTI function table (cupti_loader.cpp) ---- */
struct ga_cupti_table {
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                  CUpti_CallbackId);
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
    CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                             CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
    CUptiResult (*ActivityFlushAll)(uint32_t);
    CUptiResult (*Finalize)(void);
    CUptiResult (*GetResultString)(CUptiResult, const char **); /* optional */
    CUptiResult (*GetVersion)(uint32_t *);                     /* optional */
    CUptiResult (*GetTimestamp)(uint64_t *);                   /* optional: launch time */
    CUptiResult (*GetGraphNodeId)(CUgraphNode, uint64_t *);    /* optional: graph capture stacks */
    /* optional (CUDA >= 13.0): a named subscription that names the client
     * holding CUPTI when it fails, and refuses CUDA 13.3's multi-subscriber mode */
    CUptiResult (*SubscribeV2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *, void *);
};
/* cuptiSubscribe_v2's parameters, as CUDA 13.3 lays them out (older headers lack
 * the last field; structSize tells CUPTI which it may read). */
struct ga_subscriber_params {
    size_t struct_size;
    const char *subscriber_name;
    char *old_subscriber_name;
    size_t old_subscriber_size;
    uint8_t allow_multiple_subscribers;
};
GA_HIDDEN extern ga_cupti_table ga_cupti;
GA_HIDDEN extern void *ga_cupti_handle;
/* Loads libcupti once; returns true when every required symbol is resolved.
 * On failure *why is a static description. */
GA_HIDDEN bool ga_cupti_load(const char **why, char *path_out, size_t path_len) noexcept;
GA_HIDDEN const char *ga_cupti_err(CUptiResult r) noexcept;

/* ---- the CUPTI gate, CUPTI's clock, and what reaches the poller (gate.cpp) ---- */
/* A callback's CUPTI call: only when enter says yes, then leave. */
GA_HIDDEN bool ga_cupti_gate_enter(void) noexcept;
GA_HIDDEN void ga_cupti_gate_leave(void) noexcept;
GA_HIDDEN void ga_cupti_buffer_enter(void) noexcept; /* a buffer callback; leave as above */
GA_HIDDEN uint32_t ga_cupti_gate_close(void) noexcept;  /* teardown: closed; returns callers inside */
GA_HIDDEN uint32_t ga_cupti_gate_inside(void) noexcept; /* callers inside now */
GA_HIDDEN void ga_cupti_gate_open(void) noexcept;
GA_HIDDEN void ga_cupti_gate_atfork_child(bool open) noexcept;
GA_HIDDEN uint64_t ga_cupti_gate_skipped(void) noexcept; /* calls refused while closed */
/* cuptiGetTimestamp through the gate; 0 when CUPTI lacks it or a teardown runs. */
GA_HIDDEN uint64_t ga_cupti_timestamp(void) noexcept;
/* A CUPTI error in a callback, kept (the first) for the poller, which takes it. */
GA_HIDDEN void ga_report_cupti_error(const char *what, CUptiResult r) noexcept;
GA_HIDDEN int ga_take_cupti_error(void) noexcept; /* 0: none */
/* The poller's sleep: until wait_ns(now) has passed or a wake; false once stopped. */
GA_HIDDEN void ga_poller_sync_init(void) noexcept; /* at load and in a fork's child */
GA_HIDDEN bool ga_poller_sleep(uint64_t (*wait_ns)(uint64_t now_ns) noexcept) noexcept;
GA_HIDDEN void ga_poller_wake(void) noexcept; /* the poller polls now */
GA_HIDDEN void ga_poller_stop(void) noexcept;
GA_HIDDEN uint64_t ga_trace_until_ns(void) noexcept; /* gpu-agent trace's deadline, CLOCK_MONOTONIC; 0: none */

/* ---- launch callback and sampling (callbacks.cpp) ---- */
GA_HIDDEN void CUPTIAPI ga_api_callback(void *userdata, CUpti_CallbackDomain domain,
                                        CUpti_CallbackId cbid, const void *cbdata) noexcept;
GA_HIDDEN void ga_sampler_reset_seen(void) noexcept;      /* at each attach */
GA_HIDDEN void ga_build_kind_table(void) noexcept;        /* at load: launch cbid kinds */
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_samples;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_forced;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_launches;
GA_HIDDEN extern std::atomic<int> ga_cuda_live;           /* CUDA used in this process */

/* ---- activity buffers and kernel records (activity.cpp), names (names.cpp) ---- */
GA_HIDDEN void CUPTIAPI ga_buffer_requested(uint8_t **buffer, size_t *size,
                                            size_t *max_records) noexcept;
GA_HIDDEN void CUPTIAPI ga_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                            size_t size, size_t valid_size) noexcept;
GA_HIDDEN void ga_replay_names(void) noexcept;                  /* names.cpp */
GA_HIDDEN uint64_t ga_kernel_id_for(const char *name) noexcept; /* names.cpp: intern a name */
GA_HIDDEN void ga_names_atfork_child(void) noexcept;
GA_HIDDEN void ga_activity_take_back(void) noexcept;    /* after a finalize: buffers CUPTI kept */
GA_HIDDEN uint64_t ga_activity_taken_back(void) noexcept;
GA_HIDDEN void ga_report_drops(void) noexcept; /* after a flush */
GA_HIDDEN uint64_t ga_activity_stat(int which) noexcept; /* GA_SC_NULL_BUFFERS, CUT_NAMES, BUFFERS, OUTSIDE_WINDOWS */
GA_HIDDEN void ga_activity_atfork_child(void) noexcept;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_batches;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_records;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_dropped;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_names;           /* names.cpp */
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_name_chunks;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_truncated_names;

/* ---- CUDA graphs: capture stacks, clones, destroys (graphs.cpp) ---- */
/* RESOURCE-domain callback ids the shim enables while attached (when
 * cuptiGetGraphNodeId exists), and their count. */
GA_HIDDEN extern const CUpti_CallbackId ga_graph_cbids[];
GA_HIDDEN extern const unsigned ga_graph_cbid_count;
GA_HIDDEN void ga_graph_callback(CUpti_CallbackId cbid, const void *cbdata) noexcept;
/* The process instantiated or launched a CUDA graph (sticky). On an H100 (CUDA 13)
 * CUPTI then refused to start again after a cuptiFinalize (NOT_INITIALIZED), and
 * PyTorch keeps CUPTI's teardown off with graphs: such a process is not torn down
 * (session.cpp). */
GA_HIDDEN extern std::atomic<int> ga_graphs_made;
GA_HIDDEN void ga_graph_reset(void) noexcept;   /* at attach and detach: forget exec graphs */
GA_HIDDEN void ga_graph_after_flush(void) noexcept; /* poller, after each periodic flush */
GA_HIDDEN uint64_t ga_graph_stat(int which) noexcept; /* GA_SC_NODE_STACKS..DESTROYS_DROPPED */
GA_HIDDEN void ga_graph_atfork_child(void) noexcept;
/* ---- unwinding (unwind.cpp) ---- */
GA_HIDDEN void ga_compute_skip_ranges(void) noexcept; /* once CUPTI is loaded */
/* Unwinds the calling thread (shim and CUPTI frames dropped) into frames
 * (GA_MAX_FRAMES); returns the count and sets *stack_id (never 0). */
GA_HIDDEN uint32_t ga_unwind(uint64_t *frames, uint64_t *stack_id) noexcept;

#include "ga_windows.h" /* the collection windows */

/* ---- PC sampling, opt-in (pcsampling.cpp) ---- */
GA_HIDDEN extern std::atomic<int> ga_pcs_on;        /* launches call ga_pcs_launch */
/* Launch callback: note the context; start, stop or drain its sampling (window_on). */
GA_HIDDEN void ga_pcs_launch(CUcontext c, bool window_on) noexcept;
GA_HIDDEN void ga_pcs_window_opened(uint64_t n) noexcept; /* collection.cpp: the n-th window opens */
GA_HIDDEN bool ga_pcs_wanted(void) noexcept;        /* GPU_AGENT_PC_SAMPLING */
GA_HIDDEN void ga_pcs_attach(void) noexcept;        /* at attach: on if wanted and possible */
GA_HIDDEN void ga_pcs_poll(void) noexcept;          /* poller: set up noted contexts */
GA_HIDDEN void ga_pcs_stop_all(bool disable) noexcept; /* detach (disable too), exit: stop, drain */
GA_HIDDEN void ga_pcs_module_loaded(const void *cbdata) noexcept; /* RESOURCE MODULE_LOADED */
GA_HIDDEN void ga_pcs_replay(void) noexcept;        /* an agent asked: reasons, cubins again */
GA_HIDDEN uint64_t ga_pcs_stat(int which) noexcept; /* GA_SC_PC_SAMPLES..CUBINS_DROPPED */
GA_HIDDEN void ga_pcs_log_exit(void) noexcept;      /* debug exit lines */

/* pcs_cubins.cpp: the cubins kept for PC sampling */
GA_HIDDEN void ga_pcs_keep_cubin(uint64_t crc, const void *image, size_t size) noexcept;
GA_HIDDEN void ga_pcs_replay_cubins(void) noexcept;
GA_HIDDEN uint64_t ga_pcs_cubin_stat(int which) noexcept;
/* ---- devices and on-demand captures (devices.cpp, shim.cpp) ---- */
GA_HIDDEN bool ga_announce_devices(void) noexcept;  /* a gpu_device probe per device; false: retry */
GA_HIDDEN extern bool ga_in_injection_init;         /* inside cuInit: no driver calls */

/* ---- what CUPTI collects now (collection.cpp), for the state machine ---- */
GA_HIDDEN CUptiResult ga_collect_up(const char **what) noexcept;    /* subscribe (attach) */
GA_HIDDEN void ga_collect_module_callbacks(void) noexcept;          /* PC sampling's cubins */
/* After the attach's subscription: teardowns or not, the windows start. */
GA_HIDDEN CUptiResult ga_collect_begin(uint64_t now, const char **what) noexcept;
GA_HIDDEN CUptiResult ga_collect_step(uint64_t now, const char **what) noexcept; /* each poll */
GA_HIDDEN CUptiResult ga_collect_flush(const char **what) noexcept; /* periodic, while CUPTI is held */
GA_HIDDEN void ga_collect_down(bool activity, bool subscribed) noexcept; /* detach, failure */
GA_HIDDEN bool ga_collect_teardowns(void) noexcept;
GA_HIDDEN const char *ga_collect_holder(void) noexcept; /* who held CUPTI at the last refusal */
GA_HIDDEN uint64_t ga_collect_next_edge_ns(void) noexcept;
GA_HIDDEN uint64_t ga_collect_stat(int which) noexcept; /* GA_SC_FLUSHES, WINDOWS, WINDOWS_SKIPPED */
GA_HIDDEN void ga_collect_log_exit(void) noexcept;

/* ---- the state machine (session.cpp) ---- */
enum { GA_ST_DISABLED = -1, GA_ST_IDLE = 0, GA_ST_ATTACHED = 1 };
GA_HIDDEN int ga_session_state(void) noexcept;           /* GA_ST_* */
GA_HIDDEN void ga_session_poll(void) noexcept;           /* one step; never blocks */
GA_HIDDEN void ga_session_disable(void) noexcept;        /* off for this process's life */
GA_HIDDEN uint64_t ga_session_next_edge_ns(void) noexcept; /* the poller wakes then */
GA_HIDDEN uint64_t ga_session_stat(int which) noexcept;  /* GA_SC_ATTACHES/DETACHES/FLUSHES/WINDOWS */
GA_HIDDEN void ga_session_atfork_child(void) noexcept;
GA_HIDDEN void ga_session_at_exit(void) noexcept;        /* the poller stopped: flush, log */

/* ---- CUPTI's teardown (teardown.cpp) ----
 * LIVE: subscribed. REQUESTED: the poller asked, the next driver API exit on an
 * application thread finalizes (TEARING meanwhile). DOWN: nothing of CUPTI is on.
 * EXITING: the process exits with a request pending. GONE: a fork child of a
 * process that was tearing down. */
enum { GA_TD_DOWN = 0, GA_TD_LIVE, GA_TD_REQUESTED, GA_TD_TEARING, GA_TD_EXITING, GA_TD_GONE };
GA_HIDDEN extern std::atomic<int> ga_td_state;
GA_HIDDEN void ga_teardown_request(CUpti_SubscriberHandle sub) noexcept; /* poller, after a forced flush */
GA_HIDDEN void ga_teardown_live(void) noexcept;      /* poller, subscribed again */
GA_HIDDEN bool ga_teardown_cancel(int to_state) noexcept; /* REQUESTED -> to_state */
GA_HIDDEN void ga_teardown_at_api_exit_slow(void) noexcept; /* api_exit.h's slow path */
GA_HIDDEN bool ga_teardown_wait(unsigned ms) noexcept; /* while TEARING, at most ms */
GA_HIDDEN void ga_teardown_atfork_child(void) noexcept;
GA_HIDDEN uint64_t ga_teardown_stat(int which) noexcept; /* GA_SC_TEARDOWNS..GATE_SKIPPED */
GA_HIDDEN void ga_teardown_log_exit(void) noexcept;

#endif
