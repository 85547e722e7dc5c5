/* shim.cpp: initialization, the poller thread, exit and fork handling, and the
 * exported C API. The state machine the poller drives (CUPTI attach/detach,
 * windows, flushes) is in session.cpp; settings and logging in config.cpp.
 *
 * Life cycle
 *   load (LD_PRELOAD constructor): read env; if CUDA_INJECTION64_PATH is
 *     unset, point it at this .so so the driver calls InitializeInjection at
 *     cuInit. Nothing else: no thread, no CUPTI.
 *   InitializeInjection (cuInit, once per process): start the poller thread
 *     and poll the semaphore once synchronously.
 *   poller (every GPU_AGENT_POLL_MS): semaphore 0 -> >0: attach (load CUPTI,
 *     subscribe, replay names, start the collection windows); >0 -> 0: detach
 *     (disable, flush, unsubscribe). While attached: at each window edge
 *     (window.cpp: one GPU_AGENT_WINDOW_MS slot in every GPU_AGENT_DUTY_CYCLE)
 *     launch callbacks and CONCURRENT_KERNEL activity go on or off together,
 *     and cuptiActivityFlushAll(0) runs every GPU_AGENT_FLUSH_MS.
 *   exit: stop the poller (bounded wait) and, if attached, flush.
 *
 * Locking: the poller's mutex/condvar is only held around its sleep; state
 * transitions take session.cpp's try-lock. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <sys/auxv.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ga_internal.h"
#include "launch_cbids.h"

/* The probe contract's version (gpu_agent_probes.h): the agent reads it from this
 * file before it attaches, and refuses another version with one clear line. */
extern "C" GA_EXPORT const uint32_t gpu_agent_contract_version = GA_CONTRACT_VERSION;

bool ga_in_injection_init; /* InitializeInjection's own poll: inside cuInit */

static std::atomic<int> g_common_once{0};
static std::atomic<int> g_inject_once{0};
static pid_t g_init_pid;

/* poller */
static std::atomic<int> g_poller_running{0};
static std::atomic<int> g_had_poller{0};

static void common_init(void) {
    if (g_common_once.exchange(1)) return;
    ga_read_config(GA_BENCH_READ_CONFIG);
}

/* ------------------------------------------------------------------ */
/* poller thread                                                       */

static bool g_first_poll;

/* How long the poller sleeps from now_ns: its interval, or to the next window edge. */
static uint64_t poll_wait_ns(uint64_t now_ns) noexcept {
    uint64_t wait = (uint64_t)(g_first_poll && ga_cfg.poll_ms > 10 ? 10 : ga_cfg.poll_ms) * 1000000ull;
    g_first_poll = false; /* soon after cuInit: a short job's devices are announced in time */
    uint64_t edge = ga_session_next_edge_ns();
    if (edge > now_ns && edge - now_ns < wait) wait = edge - now_ns;
    else if (edge <= now_ns) wait = 0;
    return wait;
}

static void *poller_main(void *) {
    pthread_setname_np(pthread_self(), "ga-shim-poll");
    g_first_poll = true;
    while (ga_poller_sleep(poll_wait_ns)) ga_session_poll();
    g_poller_running.store(0, std::memory_order_release);
    return nullptr;
}

static void start_poller(void) {
    if (g_poller_running.exchange(1)) return;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    /* The poller must not take the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    int rc = pthread_create(&th, &a, poller_main, nullptr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        g_poller_running.store(0);
        ga_log("cannot start the poller thread (%s); profiling disabled in this process",
               strerror(rc));
        ga_session_disable();
        return;
    }
    g_had_poller.store(1);
}

/* Stop the poller, waiting at most ~timeout_ms for it to leave. */
static void stop_poller(unsigned timeout_ms) {
    ga_poller_stop();
    for (unsigned i = 0; i < timeout_ms && g_poller_running.load(std::memory_order_acquire); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, nullptr);
    }
}

/* ------------------------------------------------------------------ */
/* exit and fork                                                       */

static void at_exit_handler(void) {
    if (!g_had_poller.load()) return;
    stop_poller(1000);
    ga_session_at_exit();
}

static void atfork_child(void) {
    /* The child has only the forking thread: the poller is gone and any lock
     * may have been held by a thread that no longer exists. */
    ga_poller_sync_init();
    ga_session_atfork_child();
    g_poller_running.store(0);
    ga_activity_atfork_child();
    ga_graph_atfork_child();
    /* CUDA set up by the parent is unusable in the child; CUPTI is only
     * touched again if the child itself runs CUDA (a launch callback or a
     * new InitializeInjection marks it live). */
    ga_cuda_live.store(0);
    g_inject_once.store(0);
    if (g_had_poller.load() && ga_session_state() != GA_ST_DISABLED) start_poller();
}

/* ------------------------------------------------------------------ */
/* entry points                                                        */

/* If another copy of the shim (a different file) is already loaded into the
 * global scope, this copy stays inert and defers to it. */
static bool another_copy_active(void) {
    void *other = dlsym(RTLD_DEFAULT, "gpu_agent_shim_state");
    return other && other != (void *)&gpu_agent_shim_state;
}

extern "C" GA_EXPORT int InitializeInjection(void) {
    if (another_copy_active()) {
        int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "InitializeInjection");
        if (f && f != &InitializeInjection) return f();
        return 1;
    }
    if (g_inject_once.exchange(1)) return 1;
    common_init();
    static std::atomic<int> hooks_once{0};
    if (!hooks_once.exchange(1)) {
        ga_poller_sync_init();
        atexit(at_exit_handler);
        pthread_atfork(nullptr, nullptr, atfork_child);
    }
    g_init_pid = getpid();
    ga_cuda_live.store(1);
    ga_debug("initialized in pid %d (poll %u ms, flush %u ms)", (int)g_init_pid, ga_cfg.poll_ms,
             ga_cfg.flush_ms);
    if (ga_session_state() == GA_ST_DISABLED) return 1;
    ga_in_injection_init = true;
    ga_session_poll(); /* an agent already attached sees the very first launch */
    ga_in_injection_init = false;
    if (ga_session_state() != GA_ST_DISABLED) start_poller();
    return 1;
}

__attribute__((constructor)) static void ga_constructor(void) {
    if (another_copy_active()) return;
    common_init();
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (inj && *inj) return;
    Dl_info info;
    if (!dladdr((void *)&ga_constructor, &info) || !info.dli_fname) return;
    char path[PATH_MAX];
    const char *p = realpath(info.dli_fname, path) ? path : info.dli_fname;
    setenv("CUDA_INJECTION64_PATH", p, 0);
    ga_debug("set CUDA_INJECTION64_PATH=%s", p);
}

/* ---- tiny C API for tests and tools ---- */

/* 0 idle, 1 attached, -1 disabled. */
extern "C" GA_EXPORT int gpu_agent_shim_state(void) { return ga_session_state(); }

/* Counters, by enum ga_shim_counter (gpu_agent_shim.h names and explains them). */
extern "C" GA_EXPORT uint64_t gpu_agent_shim_counter(int which) {
    switch (which) {
    case GA_SC_LAUNCHES: return ga_stat_launches.load();
    case GA_SC_SAMPLES: return ga_stat_samples.load();
    case GA_SC_FORCED: return ga_stat_forced.load();
    case GA_SC_BATCHES: return ga_stat_batches.load();
    case GA_SC_RECORDS: return ga_stat_records.load();
    case GA_SC_CUPTI_DROPPED: return ga_stat_dropped.load();
    case GA_SC_NAMES: return ga_stat_names.load();
    case GA_SC_NAME_CHUNKS: return ga_stat_name_chunks.load();
    case GA_SC_ATTACHES:
    case GA_SC_DETACHES:
    case GA_SC_FLUSHES:
    case GA_SC_WINDOWS:
    case GA_SC_WINDOWS_SKIPPED: return ga_session_stat(which);
    case GA_SC_BUDGET_OVER: return ga_budget_stat_over();
    case GA_SC_TEARDOWNS:
    case GA_SC_TEARDOWNS_FAILED:
    case GA_SC_GATE_SKIPPED: return ga_teardown_stat(which);
    case GA_SC_NULL_BUFFERS:
    case GA_SC_CUT_NAMES:
    case GA_SC_BUFFERS:
    case GA_SC_OUTSIDE_WINDOWS: return ga_activity_stat(which);
    case GA_SC_POLLER: return (uint64_t)g_poller_running.load();
    case GA_SC_CUDA_LIVE: return (uint64_t)ga_cuda_live.load();
    case GA_SC_NODE_STACKS:
    case GA_SC_CLONES:
    case GA_SC_NODES_DESTROYED:
    case GA_SC_EXECS:
    case GA_SC_EXEC_NODES:
    case GA_SC_DESTROY_QUEUE:
    case GA_SC_DESTROYS_DROPPED: return ga_graph_stat(which);
    case GA_SC_IN_WINDOW: return (uint64_t)(ga_window_on.load() == GA_WIN_OPEN);
    case GA_SC_UNWEIGHTED: return ga_stat_unweighted.load();
    case GA_SC_HELD_OVERFLOW: return ga_stat_held_overflow.load();
    case GA_SC_UNSEEN: return ga_stat_unseen.load();
    case GA_SC_JOINED: return ga_stat_joined.load();
    case GA_SC_LEFT_OUT_LAUNCHES: return ga_stat_left_out_launches.load();
    case GA_SC_LEFT_OUT_RECORDS: return ga_stat_left_out_records.load();
    case GA_SC_LEFT_OUT_LATE: return ga_stat_left_out_late.load();
    case GA_SC_PC_SAMPLES:
    case GA_SC_PC_RECORDS:
    case GA_SC_PC_DROPPED:
    case GA_SC_CUBINS:
    case GA_SC_CUBINS_DROPPED:
    case GA_SC_PC_GET_DATA_ERRORS: return ga_pcs_stat(which);
    }
    return 0;
}

extern "C" GA_EXPORT const char *gpu_agent_shim_counter_name(int which) {
    static const char *const names[] = {
#define GA_SC_NAME(id, name, meaning) #name,
        GA_SHIM_COUNTER_TABLE(GA_SC_NAME)
#undef GA_SC_NAME
    };
    return which >= 0 && which < GA_SC_COUNT ? names[which] : nullptr;
}

/* Runs one poll step now (tests: no need to wait for the poller). */
extern "C" GA_EXPORT void gpu_agent_shim_poll(void) { ga_session_poll(); }
