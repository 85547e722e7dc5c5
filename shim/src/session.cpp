/* session.cpp: the shim's state machine. One poll step (ga_session_poll, on the
 * poller thread or in InitializeInjection) reads the attach semaphore and moves
 * between idle, attached and disabled: attach (load CUPTI, subscribe, replay
 * names, start the collection windows), detach (disable, flush, tear down), and
 * while attached the window steps and the periodic flushes; what CUPTI collects
 * at each step is collection.cpp's. The exit flush is here too. shim.cpp starts
 * and stops the poller and owns the entry points.
 *
 * Locking: state transitions are serialized by a try-lock (g_busy) that is
 * never waited on without a bound; the CUPTI callbacks take no lock of this
 * file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ga_internal.h"
#include "launch_hook.h"
#include "launch_cbids.h"

enum { ST_DISABLED = GA_ST_DISABLED, ST_IDLE = GA_ST_IDLE, ST_ATTACHED = GA_ST_ATTACHED };


static std::atomic<int> g_state{ST_IDLE};
static std::atomic<int> g_busy{0};
static std::atomic<uint64_t> g_stat_attaches, g_stat_detaches;
static bool g_block_until_drop;                 /* after OOM: wait for the next attach */
static uint64_t g_retry_at_ns;                  /* another CUPTI subscriber: retry later */
static uint64_t g_next_flush_ns;
static bool g_replay_asked;                     /* the replay semaphore was up at the last poll */
static uint64_t g_replayed_ns;                  /* the last replay (or attach, which replays) */
/* While the replay semaphore stays up, the names go again this often: the kernel
 * raises a probe's semaphore once, whoever holds it, so an agent that asks while
 * another's request is up sees no rise (an agent started within 1.5 s of another
 * got no name of a running process: 3 runs of 4). Every agent holds it for
 * REPLAY_HOLD_S (agent/gpu_agent/probes/shim_attach.py, 2 s), more than this plus
 * a poll: one replay comes inside each request, whoever else asks. */
#define GA_REPLAY_EVERY_NS 800000000ull
static bool g_devices_told;                     /* gpu_device fired since the attach or replay */

/* ------------------------------------------------------------------ */
/* attach / detach (poller thread, InitializeInjection, exit)          */

void ga_session_disable(void) noexcept { g_state.store(ST_DISABLED, std::memory_order_release); }

/* A CUPTI call failed during attach or while attached. */
static void handle_failure(const char *what, CUptiResult r) {
    if (r == CUPTI_ERROR_OUT_OF_MEMORY) {
        ga_log("%s: CUPTI out of memory; profiling off until the agent re-attaches", what);
        g_block_until_drop = true;
        g_state.store(ST_IDLE, std::memory_order_release);
        return;
    }
    ga_log("%s failed: %s (%d); profiling disabled in this process", what, ga_cupti_err(r), (int)r);
    ga_session_disable();
}

static void do_attach(void) {
    /* The last attachment's teardown waits for a launch's API exit: attach after it. */
    int td = ga_td_state.load(std::memory_order_acquire);
    if (td != GA_TD_DOWN) {
        if (td == GA_TD_GONE || td == GA_TD_EXITING) ga_session_disable();
        return;
    }
    if (!ga_cupti_handle) {
        const char *why = "?";
        char path[512] = "";
        if (!ga_cupti_load(&why, path, sizeof(path))) {
            ga_log("%s; profiling disabled in this process", why);
            ga_session_disable();
            return;
        }
        uint32_t ver = 0;
        if (ga_cupti.GetVersion) ga_cupti.GetVersion(&ver);
        ga_debug("loaded %s (CUPTI API version %u)", path, ver);
        ga_compute_skip_ranges();
    }
    ga_sampler_reset_seen();
    ga_graph_reset();
    ga_build_kind_table();
    ga_replay_names();

    const char *what = nullptr;
    CUptiResult r = ga_collect_up(&what);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        static bool logged;
        if (!logged || ga_debug_on)
            ga_log("%s holds CUPTI; retrying every 10 s while the agent is attached", ga_collect_holder());
        logged = true;
        g_retry_at_ns = ga_now_ns() + 10ull * 1000000000ull;
        return;
    }
    if (r == CUPTI_ERROR_NOT_INITIALIZED) return; /* CUPTI still coming back from a finalize */
    if (r != CUPTI_SUCCESS) return handle_failure(what, r);
    /* PC sampling (opt-in): modules' cubins from now on, for their line tables. */
    ga_pcs_attach();
    if (ga_pcs_on.load(std::memory_order_relaxed)) {
        ga_collect_module_callbacks();
        ga_pcs_replay(); /* what an earlier attachment set up */
    }
    ga_take_cupti_error(); /* one from before this attach is not its */
    ga_audit_init();
    uint64_t now = ga_now_ns();
    r = ga_collect_begin(now, &what);
    if (r != CUPTI_SUCCESS) {
        ga_collect_down(true, true);
        ga_hook_restore();
        return handle_failure(what, r);
    }
    g_state.store(ST_ATTACHED, std::memory_order_release);
    g_next_flush_ns = now + (uint64_t)ga_cfg.flush_ms * 1000000ull;
    g_stat_attaches.fetch_add(1, std::memory_order_relaxed);
    g_devices_told = false;
    g_replay_asked = ga_replay_semaphore_value() != 0; /* the attach replayed the names */
    g_replayed_ns = now;
    ga_fire_attach_probe();
    char windows[64];
    if (ga_budget_on())
        snprintf(windows, sizeof(windows), "windows under a %.2f %% budget", ga_cfg.budget_bp / 100.0);
    else
        snprintf(windows, sizeof(windows), "one %u ms window in %u", ga_cfg.window_ms, ga_cfg.duty_cycle);
    ga_debug("attached (pid %d at %.6f s CLOCK_MONOTONIC, sample period %u, graph period %u, %s%s%s)", (int)getpid(),
             (double)now / 1e9, ga_cfg.sample_period,
             ga_cfg.graph_sample_period, windows, ga_audit_on() ? ", audit" : "",
             ga_collect_teardowns() ? ", teardown after each" : "");
}

static void do_detach(const char *why) {
    ga_collect_down(true, true);
    unsigned back = ga_hook_restore(); /* the launch counter's slots as they were */
    g_state.store(ST_IDLE, std::memory_order_release);
    g_stat_detaches.fetch_add(1, std::memory_order_relaxed);
    ga_debug("detached (pid %d): %s; %u launch counter slots put back", (int)getpid(), why, back);
}

static bool try_busy(void) {
    int z = 0;
    return g_busy.compare_exchange_strong(z, 1, std::memory_order_acq_rel);
}
static void release_busy(void) { g_busy.store(0, std::memory_order_release); }

/* One step of the state machine. Never blocks on another thread. */
void ga_session_poll(void) noexcept {
    if (!try_busy()) return;
    int st = g_state.load(std::memory_order_acquire);
    if (st != ST_DISABLED && ga_cuda_live.load(std::memory_order_relaxed)) {
        unsigned sem = ga_semaphore_value();
        /* GPU_AGENT_EXP_TOGGLE_MS (benchmark build): the OFF part of each ON + OFF
         * cycle (CLOCK_MONOTONIC, so processes toggle in step) counts as no agent. */
        if (sem && ga_exp_toggled_off(ga_now_ns())) sem = 0;
        int perr = ga_take_cupti_error();
        if (st == ST_ATTACHED && perr) {
            do_detach("CUPTI error in a callback");
            handle_failure("CUPTI activity processing", (CUptiResult)perr);
        } else if (sem == 0) {
            g_block_until_drop = false;
            g_retry_at_ns = 0;
            if (st == ST_ATTACHED) do_detach("agent gone");
        } else if (st == ST_IDLE) {
            if (!g_block_until_drop && ga_now_ns() >= g_retry_at_ns) do_attach();
        } else if (st == ST_ATTACHED) {
            /* An agent that started asks for the names it missed: the attach
             * semaphore does not rise for a second agent (gpu_agent_probes.h). */
            bool asked = ga_replay_semaphore_value() != 0;
            uint64_t t = ga_now_ns();
            if (asked && (!g_replay_asked || t - g_replayed_ns >= GA_REPLAY_EVERY_NS)) {
                g_replayed_ns = t;
                g_devices_told = false;
                ga_replay_names();
                ga_pcs_replay();
                ga_fire_attach_probe();
                ga_fire_replay_probe();
                ga_debug("names replayed for an agent that asked (pid %d)", (int)getpid());
            }
            g_replay_asked = asked;
            if (!g_devices_told && !ga_in_injection_init && /* not inside cuInit */
                ga_td_state.load(std::memory_order_acquire) == GA_TD_LIVE) /* CUPTI's clock */
                g_devices_told = ga_announce_devices();
            if (!ga_in_injection_init) ga_pcs_poll(); /* contexts launches noted: set up */
            uint64_t now = ga_now_ns();
            const char *what = nullptr;
            CUptiResult r = ga_collect_step(now, &what);
            if (r != CUPTI_SUCCESS) {
                do_detach("window edge failed");
                handle_failure(what, r);
                release_busy();
                return;
            }
            if (now >= g_next_flush_ns) {
                g_next_flush_ns = now + (uint64_t)ga_cfg.flush_ms * 1000000ull;
                r = ga_collect_flush(&what);
                if (r != CUPTI_SUCCESS) {
                    do_detach("flush failed");
                    handle_failure(what, r);
                }
            }
        }
    }
    release_busy();
}

int ga_session_state(void) noexcept { return g_state.load(std::memory_order_acquire); }

uint64_t ga_session_next_edge_ns(void) noexcept { return ga_collect_next_edge_ns(); }

void ga_session_atfork_child(void) noexcept {
    g_busy.store(0);
    ga_teardown_atfork_child();
}

uint64_t ga_session_stat(int which) noexcept {
    switch (which) {
    case GA_SC_ATTACHES: return g_stat_attaches.load();
    case GA_SC_DETACHES: return g_stat_detaches.load();
    case GA_SC_FLUSHES:
    case GA_SC_WINDOWS:
    case GA_SC_WINDOWS_SKIPPED: return ga_collect_stat(which);
    }
    return 0;
}

void ga_session_at_exit(void) noexcept {
    /* Bounded wait for a transition in progress on another thread. */
    bool got = false;
    for (int i = 0; i < 500 && !(got = try_busy()); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, nullptr);
    }
    if (!got) return;
    if (g_state.load() == ST_ATTACHED && ga_cuda_live.load()) {
        /* A window open at exit closes here, so that its time counts. */
        if (ga_cfg.duty_cycle > 1 && ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN) {
            ga_window_closed();
            /* activity stays on for the exit flush: later launches are not the window's */
            ga_window_on.store(GA_WIN_EDGE, std::memory_order_release);
        }
        /* A teardown asked for and not begun never begins now; one under way on
         * another thread is waited for (bounded). Either way that window's records
         * were flushed when it was asked for: no CUPTI call is made then. */
        if (!ga_teardown_cancel(GA_TD_EXITING) && !ga_teardown_wait(1000))
            ga_debug("exit (pid %d): a teardown still runs on another thread", (int)getpid());
        bool live = ga_td_state.load(std::memory_order_acquire) == GA_TD_LIVE;
        if (live) ga_pcs_stop_all(false); /* samples of the window open at exit */
        if (!g_devices_told) /* a job shorter than one poll */
            g_devices_told = ga_announce_devices();
        CUptiResult r = live ? ga_cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) : CUPTI_SUCCESS;
        ga_window_release_records(false);
        if (live) ga_report_drops();
        ga_debug("exit flush (pid %d): %s", (int)getpid(),
                 !live ? "none (torn down)" : r == CUPTI_SUCCESS ? "ok" : ga_cupti_err(r));
        ga_audit_write();
    }
    ga_debug("exit (pid %d): %llu launches collected, %llu kernel records (%llu lost by CUPTI), "
             "%llu windows, "
             "%llu launches seen while attached, %llu after the last window, %llu records "
             "weighted early, %llu records of unseen launches (%llu of them late: their launch's entry "
             "reused), %llu launches joined to the window "
             "before them, %llu graph launches left out (%llu records, %llu of them late), %llu records of "
             "launches outside windows",
             (int)getpid(), (unsigned long long)ga_stat_launches.load(),
             (unsigned long long)ga_stat_records.load(), (unsigned long long)ga_stat_dropped.load(),
             (unsigned long long)ga_collect_stat(GA_SC_WINDOWS),
             (unsigned long long)ga_launch_seq.load(), (unsigned long long)ga_stat_unweighted.load(),
             (unsigned long long)ga_stat_held_overflow.load(), (unsigned long long)ga_stat_unseen.load(),
             (unsigned long long)ga_stat_late_records.load(), (unsigned long long)ga_stat_joined.load(),
             (unsigned long long)ga_stat_left_out_launches.load(),
             (unsigned long long)ga_stat_left_out_records.load(),
             (unsigned long long)ga_stat_left_out_late.load(),
             (unsigned long long)ga_activity_stat(GA_SC_OUTSIDE_WINDOWS));
#ifdef GA_BENCH_BUILD
    if (GA_EXP(internal))
        ga_debug("internal launches (pid %d): %llu INTERNAL_LAUNCH_API records", (int)getpid(),
                 (unsigned long long)ga_stat_internal_launches.load());
#endif
    if (ga_pcs_wanted()) ga_pcs_log_exit();
    ga_teardown_log_exit();
    ga_budget_log_exit();
    if (ga_stat_unseen.load()) {
        char unseen[512];
        ga_unseen_kernels(unseen, sizeof(unseen));
        ga_debug("unseen launches (pid %d), first kernels: %s", (int)getpid(), unseen);
    }
    ga_collect_log_exit();
    release_busy();
}

