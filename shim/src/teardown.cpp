/* teardown.cpp: CUPTI torn down the documented way, so that nothing lingers.
 *
 * Why: once CONCURRENT_KERNEL activity has been enabled, every later launch of the
 * process costs about 1-1.4 us more on an H100 (CUPTI instruments kernels), after
 * the activity is disabled and after cuptiUnsubscribe, until cuptiFinalize. So the
 * shim finalizes CUPTI at the end of every collection window and at every detach.
 *
 * The protocol (CUPTI's "Dynamic Attach and Detach"; Kineto's teardown): the poller
 * disables activity and forces a flush, then asks (ga_teardown_request). The first
 * driver API-exit callback on an application thread (a launch: only launch
 * callbacks are enabled) then unsubscribes and calls cuptiFinalize, inside the
 * callback, as CUPTI asks. While it runs, no thread of the shim may be inside
 * CUPTI: the poller makes no CUPTI call from its request until the teardown is
 * done (ga_teardown_state), and the CUPTI calls made from callbacks on other
 * application threads (cuptiGetTimestamp, cuptiGetGraphNodeId, PC sampling) and
 * the buffer callbacks pass a gate (gate.cpp) that the finalizing
 * thread closes and waits to drain first. The poller subscribes again for the
 * next window (ga_teardown_live). A thread that never launches again leaves the
 * request pending: its process pays nothing while it makes no launch.
 * Per attach: ga_teardown_stat's counters and the finalize times. */
#include <time.h>
#include <unistd.h>

#include "ga_internal.h"

std::atomic<int> ga_td_state{GA_TD_DOWN};
static std::atomic<CUpti_SubscriberHandle> g_td_sub{nullptr};
static std::atomic<uint64_t> g_stat_teardowns, g_stat_fin_ns, g_stat_fin_max_ns, g_stat_gate_waits, g_stat_failed;

void ga_teardown_request(CUpti_SubscriberHandle sub) noexcept {
    g_td_sub.store(sub, std::memory_order_relaxed);
    ga_td_state.store(GA_TD_REQUESTED, std::memory_order_release);
}

void ga_teardown_live(void) noexcept {
    ga_cupti_gate_open();
    ga_td_state.store(GA_TD_LIVE, std::memory_order_release);
}

bool ga_teardown_cancel(int to_state) noexcept {
    int want = GA_TD_REQUESTED;
    return ga_td_state.compare_exchange_strong(want, to_state, std::memory_order_acq_rel);
}

/* On an application thread, inside a driver API-exit callback. */
void ga_teardown_at_api_exit_slow(void) noexcept {
    int want = GA_TD_REQUESTED;
    if (!ga_td_state.compare_exchange_strong(want, GA_TD_TEARING, std::memory_order_acq_rel)) return;
    uint64_t t0 = ga_now_ns();
    /* Close the gate (gate.cpp), then wait (bounded) for the callers inside CUPTI to leave. */
    uint32_t inside = ga_cupti_gate_close();
    for (int spins = 0; inside != 0; spins++) {
        if (spins == 0) g_stat_gate_waits.fetch_add(1, std::memory_order_relaxed);
        if (ga_now_ns() - t0 > 20000000ull) {
            /* 20 ms: a caller stuck inside CUPTI. The next API exit tries again. */
            ga_cupti_gate_open();
            g_stat_failed.fetch_add(1, std::memory_order_relaxed);
            ga_td_state.store(GA_TD_REQUESTED, std::memory_order_release);
            return;
        }
        if (spins > 100) {
            struct timespec ts = {0, 2000};
            nanosleep(&ts, nullptr);
        }
        inside = ga_cupti_gate_inside();
    }
    CUpti_SubscriberHandle sub = g_td_sub.exchange(nullptr, std::memory_order_relaxed);
    if (sub) ga_cupti.Unsubscribe(sub);
    CUptiResult r = ga_cupti.Finalize();
    uint64_t dt = ga_now_ns() - t0;
    ga_budget_note_stall(dt, true);
    ga_window_note_teardown(dt);
    g_stat_fin_ns.fetch_add(dt, std::memory_order_relaxed);
    uint64_t mx = g_stat_fin_max_ns.load(std::memory_order_relaxed);
    while (dt > mx && !g_stat_fin_max_ns.compare_exchange_weak(mx, dt, std::memory_order_relaxed)) {
    }
    if (r != CUPTI_SUCCESS) g_stat_failed.fetch_add(1, std::memory_order_relaxed);
    else g_stat_teardowns.fetch_add(1, std::memory_order_relaxed), ga_activity_take_back();
    /* The gate stays closed until the poller subscribes again. */
    ga_td_state.store(GA_TD_DOWN, std::memory_order_release);
    ga_poller_wake();
}

bool ga_teardown_wait(unsigned ms) noexcept {
    for (unsigned i = 0; ga_td_state.load(std::memory_order_acquire) == GA_TD_TEARING; i++) {
        if (i >= ms * 10) return false;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, nullptr);
    }
    return true;
}

void ga_teardown_atfork_child(void) noexcept {
    /* The finalizing thread does not exist in the child: CUPTI is left as it was
     * there, half torn down; the child never touches it again. */
    if (ga_td_state.load() == GA_TD_TEARING) ga_td_state.store(GA_TD_GONE);
    ga_cupti_gate_atfork_child(ga_td_state.load() == GA_TD_LIVE);
}

uint64_t ga_teardown_stat(int which) noexcept {
    switch (which) {
    case GA_SC_TEARDOWNS: return g_stat_teardowns.load();
    case GA_SC_TEARDOWNS_FAILED: return g_stat_failed.load();
    case GA_SC_GATE_SKIPPED: return ga_cupti_gate_skipped();
    }
    return 0;
}

void ga_teardown_log_exit(void) noexcept {
    uint64_t n = g_stat_teardowns.load();
    if (!n) return;
    ga_debug("teardowns (pid %d): %llu, finalize mean %.2f max %.2f ms, %llu waited for callbacks in CUPTI, "
             "%llu CUPTI calls skipped, %llu failed or put off; %llu buffers CUPTI kept taken back, "
             "%llu buffer requests refused",
             (int)getpid(), (unsigned long long)n, (double)g_stat_fin_ns.load() / (double)n / 1e6,
             (double)g_stat_fin_max_ns.load() / 1e6, (unsigned long long)g_stat_gate_waits.load(),
             (unsigned long long)ga_cupti_gate_skipped(), (unsigned long long)g_stat_failed.load(),
             (unsigned long long)ga_activity_taken_back(),
             (unsigned long long)ga_activity_stat(GA_SC_NULL_BUFFERS));
}
