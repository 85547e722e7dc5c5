/* gate.cpp: how the shim's threads reach CUPTI while a teardown may run, and what
 * they hand the poller. The lowest layer of the collection: every unit may call it,
 * it calls none.
 *
 * - The gate: CUPTI calls made from callbacks on application threads
 *   (cuptiGetTimestamp, cuptiGetGraphNodeId, PC sampling) and the buffer callbacks
 *   pass it; the finalizing thread (teardown.cpp) closes it and waits for those
 *   inside to leave; the poller opens it when it subscribes again.
 * - CUPTI's clock (cuptiGetTimestamp), through the gate.
 * - A CUPTI error met off the poller (a buffer callback's), kept for the poller,
 *   which detaches on it (session.cpp).
 * - The poller's wake-up (shim.cpp's thread waits on it), and the on-demand
 *   capture's deadline that the agent writes into the process. */
#include <pthread.h>

#include "ga_internal.h"

/* The gate: bit 31 closed; the low bits count callers inside CUPTI. */
static std::atomic<uint32_t> g_gate{0};
static const uint32_t GATE_CLOSED = 1u << 31;
static std::atomic<uint64_t> g_stat_skipped_calls;

bool ga_cupti_gate_enter(void) noexcept {
    uint32_t g = g_gate.fetch_add(1, std::memory_order_acq_rel);
    if (GA_LIKELY(!(g & GATE_CLOSED))) return true;
    g_gate.fetch_sub(1, std::memory_order_acq_rel);
    g_stat_skipped_calls.fetch_add(1, std::memory_order_relaxed);
    return false;
}

void ga_cupti_gate_leave(void) noexcept { g_gate.fetch_sub(1, std::memory_order_acq_rel); }

/* Buffer callbacks run whether the gate is closed or not (their records must be
 * read), but the finalizing thread waits for those already running. */
void ga_cupti_buffer_enter(void) noexcept { g_gate.fetch_add(1, std::memory_order_acq_rel); }

uint32_t ga_cupti_gate_close(void) noexcept {
    return g_gate.fetch_or(GATE_CLOSED, std::memory_order_acq_rel) & ~GATE_CLOSED;
}

uint32_t ga_cupti_gate_inside(void) noexcept { return g_gate.load(std::memory_order_acquire) & ~GATE_CLOSED; }

void ga_cupti_gate_open(void) noexcept { g_gate.fetch_and(~GATE_CLOSED, std::memory_order_acq_rel); }

void ga_cupti_gate_atfork_child(bool open) noexcept { g_gate.store(open ? 0 : GATE_CLOSED); }

uint64_t ga_cupti_gate_skipped(void) noexcept { return g_stat_skipped_calls.load(); }

uint64_t ga_cupti_timestamp(void) noexcept {
    uint64_t ts = 0;
    if (!ga_cupti.GetTimestamp || !ga_cupti_gate_enter()) return 0;
    if (ga_cupti.GetTimestamp(&ts) != CUPTI_SUCCESS) ts = 0;
    ga_cupti_gate_leave();
    return ts;
}

static std::atomic<int> g_pending_error{0};

void ga_report_cupti_error(const char *what, CUptiResult r) noexcept {
    int z = 0;
    if (g_pending_error.compare_exchange_strong(z, (int)r))
        ga_debug("%s: %s (%d)", what, ga_cupti_err(r), (int)r);
}

int ga_take_cupti_error(void) noexcept { return g_pending_error.exchange(0); }

/* ---- the poller's wake-up ---- */
static pthread_mutex_t g_poll_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_poll_cv;
static bool g_poll_stop;

void ga_poller_sync_init(void) noexcept {
    pthread_mutex_init(&g_poll_mu, nullptr);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_poll_cv, &ca);
    pthread_condattr_destroy(&ca);
    g_poll_stop = false;
}

bool ga_poller_sleep(uint64_t (*wait_ns)(uint64_t now_ns) noexcept) noexcept {
    pthread_mutex_lock(&g_poll_mu);
    if (!g_poll_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + wait_ns((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&g_poll_cv, &g_poll_mu, &ts);
    }
    bool stop = g_poll_stop;
    pthread_mutex_unlock(&g_poll_mu);
    return !stop;
}

void ga_poller_wake(void) noexcept {
    pthread_mutex_lock(&g_poll_mu);
    pthread_cond_signal(&g_poll_cv);
    pthread_mutex_unlock(&g_poll_mu);
}

void ga_poller_stop(void) noexcept {
    pthread_mutex_lock(&g_poll_mu);
    g_poll_stop = true;
    pthread_cond_broadcast(&g_poll_cv);
    pthread_mutex_unlock(&g_poll_mu);
}

/* gpu-agent trace --pid: the agent writes a CLOCK_MONOTONIC deadline here, into
 * this one process (process_vm_writev); until then collection is continuous
 * (window.cpp), then the defaults return. 0: no capture. */
extern "C" {
GA_EXPORT volatile uint64_t gpu_agent_trace_until_ns = 0;
}
uint64_t ga_trace_until_ns(void) noexcept { return gpu_agent_trace_until_ns; }
