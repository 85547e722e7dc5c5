/* session.cpp: the shim's state machine. One poll step (ga_session_poll, on the
 * poller thread or in InitializeInjection) reads the attach semaphore and moves
 * between idle, attached and disabled: attach (load CUPTI, subscribe, replay
 * names, start the collection windows), detach (disable, flush, unsubscribe), and
 * while attached the window edges and the periodic flushes. The exit flush is
 * here too. shim.cpp starts and stops the poller and owns the entry points.
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
#include "launch_cbids.h"

enum { ST_DISABLED = GA_ST_DISABLED, ST_IDLE = GA_ST_IDLE, ST_ATTACHED = GA_ST_ATTACHED };


static std::atomic<int> g_state{ST_IDLE};
static std::atomic<int> g_busy{0};
static std::atomic<int> g_pending_error{0};     /* CUptiResult from a callback */
static std::atomic<uint64_t> g_stat_attaches, g_stat_detaches, g_stat_flushes;
static CUpti_SubscriberHandle g_sub;
static bool g_graph_cbs;                         /* RESOURCE graph callbacks enabled */
static bool g_block_until_drop;                 /* after OOM: wait for the next attach */
static uint64_t g_retry_at_ns;                  /* another CUPTI subscriber: retry later */
static uint64_t g_next_flush_ns;
static std::atomic<uint64_t> g_next_edge_ns{UINT64_MAX}; /* next window edge (poller wakes) */
static bool g_cbids_on;                         /* launch callbacks enabled now */
static bool g_activity_on;                      /* CONCURRENT_KERNEL enabled now */
static bool g_activity_used;                    /* enabled at least once this attach */
static bool g_replay_asked;                     /* the replay semaphore was up at the last poll */
static bool g_devices_told;                     /* gpu_device fired since the attach or replay */
static std::atomic<uint64_t> g_stat_windows, g_stat_windows_skipped;
/* This attachment tears CUPTI down after every window (teardown.cpp; not with
 * continuous collection, audit mode or PC sampling, which hold activity on). */
static bool g_teardowns;
static int g_phase;                             /* GA_PHASE_*, at the last window edge */
static bool g_records_held;                     /* a window opened: records to release at detach */
static uint64_t g_up_retry_ns;                  /* re-subscription put off until then */
static uint32_t g_up_failures;                  /* NOT_INITIALIZED in a row after a teardown */
/* Debug statistics of the window edges (poller thread only): how long windows
 * really stayed open, and what switching CUPTI activity costs. */
static uint64_t g_enable_ns, g_enable_max_ns, g_disable_ns, g_disable_max_ns, g_n_enable, g_n_disable;

/* ------------------------------------------------------------------ */
/* attach / detach (poller thread, InitializeInjection, exit)          */

void ga_session_disable(void) noexcept { g_state.store(ST_DISABLED, std::memory_order_release); }

static CUptiResult set_launch_cbids(bool on);

/* Whether CUPTI may be torn down now: not once the process has CUDA graphs (see
 * ga_graphs_made), nor with GPU_AGENT_TEARDOWN=0. */
static bool may_tear_down(void) {
    return ga_cfg.teardown && !ga_graphs_made.load(std::memory_order_relaxed);
}


/* Undo a partial or full attach. Errors are ignored: we are leaving. CUPTI is
 * touched only while the shim holds it (LIVE): after a window's teardown was
 * asked for, that window's records are already in. The subscription ends with a
 * teardown (GPU_AGENT_TEARDOWN, default; not once the process has CUDA graphs,
 * ga_graphs_made): the next launch's API exit finalizes. */
static void undo_cupti(bool activity, bool subscribed) {
    if (ga_window_on.load(std::memory_order_relaxed)) ga_window_closed();
    ga_window_on.store(0, std::memory_order_relaxed);
    bool live = ga_td_state.load(std::memory_order_acquire) == GA_TD_LIVE;
    if (live) ga_pcs_stop_all(true); /* no launch callback will stop PC sampling now; its last samples */
    if (live && subscribed && ga_pcs_on.load(std::memory_order_relaxed))
        ga_cupti.EnableCallback(0, g_sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    g_next_edge_ns.store(UINT64_MAX, std::memory_order_relaxed);
    bool teardown = may_tear_down();
    if (live && subscribed && g_cbids_on && !teardown) set_launch_cbids(false);
    if (live && activity && g_activity_on) {
        ga_cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        ga_exp_internal_activity(false);
    }
    g_activity_on = false;
    /* Records of the last window may still sit in CUPTI's buffers; with what
     * window.cpp holds they go with the partial period's weight. */
    if (live && activity && g_activity_used) {
        ga_cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        ga_report_drops();
    }
    if (activity && g_records_held) ga_window_release_records(false);
    g_activity_used = g_records_held = false;
    /* Only now: the records flushed above of launches outside windows (kernel
     * activity was held on for PC sampling) were still to be dropped, not weighed. */
    ga_pcs_on.store(0, std::memory_order_relaxed);
    if (live && subscribed) {
        if (teardown) {
            if (!g_cbids_on) set_launch_cbids(true); /* their API exits tear down */
            ga_teardown_request(g_sub);
        } else {
            if (g_graph_cbs)
                for (unsigned i = 0; i < ga_graph_cbid_count; i++)
                    ga_cupti.EnableCallback(0, g_sub, CUPTI_CB_DOMAIN_RESOURCE, ga_graph_cbids[i]);
            ga_cupti.Unsubscribe(g_sub);
            ga_td_state.store(GA_TD_DOWN, std::memory_order_release);
        }
    }
    g_graph_cbs = g_cbids_on = false;
    g_sub = nullptr;
    ga_graph_reset(); /* graphs destroyed from now on are not reported */
}

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

/* Launch callbacks on or off. Unsupported ids (an older CUPTI) are skipped.
 * Only the driver domain's: every runtime launch calls a driver launch, which
 * fires its own callback with the same correlation id, so the driver domain alone
 * sees every launch once, at half the callbacks of both domains. On the H200 the
 * runtime domain on top cost eager PyTorch about 2 points (+3.4 % against +1.3 %,
 * medians of four in-process A/B runs each), and its per-thread
 * deduplication miscounted CUDA 13's launches (in-window launch counts 1.4-2.2x
 * the kernel records, against 1.0006x with the driver domain alone):
 * docs/benchmarks-history.md section 10. */
static CUptiResult set_launch_cbids(bool on) {
    for (unsigned i = 0; i < ga_launch_cbid_count; i++) {
        const ga_launch_cbid *e = &ga_launch_cbids[i];
        if (ga_launch_cbid_omitted(e)) continue;
        if (!GA_EXP(cb_runtime) && e->domain != CUPTI_CB_DOMAIN_DRIVER_API) continue;
        CUptiResult r = ga_cupti.EnableCallback(on ? 1 : 0, g_sub, e->domain, e->cbid);
        if (r == CUPTI_ERROR_INVALID_PARAMETER) {
            if (on) ga_debug("callback %s (%u) not supported by this CUPTI", e->name, (unsigned)e->cbid);
            continue;
        }
        if (r != CUPTI_SUCCESS && on) return r;
    }
    g_cbids_on = on;
    return CUPTI_SUCCESS;
}

/* Open or close a collection window (window.cpp): kernel activity on and
 * ga_window_on set (which launches are windowed and sampled), or both off;
 * opening turns activity on first, so that every launch sampled in the window
 * has its kernel record. In audit mode activity stays on and only ga_window_on
 * flips. The launch callbacks stay on throughout the attachment. */
static CUptiResult set_collection(bool on, const char **what) {
    /* With PC sampling, kernel activity stays on for the whole attachment: on an
     * H100, enabling it once PC sampling was enabled failed (CUPTI_ERROR_NOT_COMPATIBLE);
     * records of launches outside windows are then dropped (activity.cpp). */
    bool hw_act = on || ga_audit_on() || GA_EXP(hold_activity) || ga_pcs_on.load(std::memory_order_relaxed);
    CUptiResult r = CUPTI_SUCCESS;
    if (hw_act && !g_activity_on) {
        uint64_t t0 = ga_now_ns();
        r = ga_cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        uint64_t dt = ga_now_ns() - t0;
        g_enable_ns += dt, g_n_enable++;
        if (dt > g_enable_max_ns) g_enable_max_ns = dt;
        if (r != CUPTI_SUCCESS) {
            *what = "cuptiActivityEnable(CONCURRENT_KERNEL)";
            return r;
        }
        g_activity_on = g_activity_used = g_records_held = true;
        ga_exp_internal_activity(true);
    }
    if (on) {
        uint64_t ts = 0;
        if (!ga_cupti.GetTimestamp || ga_cupti.GetTimestamp(&ts) != CUPTI_SUCCESS) ts = 0;
        ga_window_opened(ts);
        ga_sampler_new_window();
        ga_window_on.store(1, std::memory_order_release);
        g_stat_windows.fetch_add(1, std::memory_order_relaxed);
        if (ga_cfg.duty_cycle >= 100) /* rare windows: say when (bench/gpu sticky check) */
            ga_debug("window opened at %.3f s (CLOCK_MONOTONIC)", (double)ga_now_ns() / 1e9);
    } else {
        if (ga_window_on.load(std::memory_order_relaxed)) ga_window_closed();
        ga_window_on.store(0, std::memory_order_release);
    }
    /* Without teardowns the launch callbacks stay on for the whole attachment:
     * they count every launch, which the record weights need (window.cpp). With
     * teardowns they go on for the count phase (step_windows) and stay on until
     * the teardown. (Experiment GPU_AGENT_EXP_CALLBACKS=windowed: they follow the
     * windows.) */
    if (GA_EXP(cb_windowed) && g_cbids_on && !on) set_launch_cbids(false);
    if (!g_cbids_on && (on || (!GA_EXP(cb_windowed) && !g_teardowns))) {
        r = set_launch_cbids(true);
        if (r != CUPTI_SUCCESS) {
            *what = "cuptiEnableCallback";
            return r;
        }
    }
    if (!hw_act && g_activity_on) {
        uint64_t t0 = ga_now_ns();
        r = ga_cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        uint64_t dt = ga_now_ns() - t0;
        g_disable_ns += dt, g_n_disable++;
        if (dt > g_disable_max_ns) g_disable_max_ns = dt;
        g_activity_on = false;
        ga_exp_internal_activity(false);
        if (r != CUPTI_SUCCESS) {
            *what = "cuptiActivityDisable(CONCURRENT_KERNEL)";
            return r;
        }
    }
    return CUPTI_SUCCESS;
}

/* Subscribe (again, after a teardown): activity buffers, the subscription, and
 * the graph callbacks, which stay on between windows (graphs captured then keep
 * their capture stacks; no launch pays for them). The launch callbacks come on
 * with a count phase or a window. */
static CUptiResult cupti_up(const char **what) {
    CUptiResult r = ga_cupti.ActivityRegisterCallbacks(ga_buffer_requested, ga_buffer_completed);
    if (r != CUPTI_SUCCESS) {
        *what = "cuptiActivityRegisterCallbacks";
        return r;
    }
    r = ga_cupti.Subscribe(&g_sub, (CUpti_CallbackFunc)ga_api_callback, nullptr);
    if (r != CUPTI_SUCCESS) {
        g_sub = nullptr;
        *what = "cuptiSubscribe";
        return r;
    }
    /* Graph capture stacks (graphs.cpp): only with cuptiGetGraphNodeId, the id
     * kernel records carry. A CUPTI without these callbacks just loses them. */
    g_graph_cbs = false;
    if (ga_cupti.GetGraphNodeId) {
        g_graph_cbs = true;
        for (unsigned i = 0; i < ga_graph_cbid_count; i++) {
            r = ga_cupti.EnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE, ga_graph_cbids[i]);
            if (r != CUPTI_SUCCESS)
                ga_debug("resource callback %u not enabled: %s", (unsigned)ga_graph_cbids[i],
                         ga_cupti_err(r));
        }
    }
    g_cbids_on = false;
    ga_teardown_live();
    return CUPTI_SUCCESS;
}

/* A process whose graphs came after its attach: from the next period on, its
 * launch callbacks stay on and count every launch (window.cpp's counted
 * weights), and CUPTI stays subscribed until the detach. */
static void stop_teardowns(void) {
    if (!g_teardowns) return;
    g_teardowns = false;
    ga_debug("CUDA graphs in pid %d: CUPTI stays subscribed between windows from now on", (int)getpid());
}

/* After a window: its records out of CUPTI now (forced), then the teardown is
 * asked for; the next launch's API exit runs it (teardown.cpp). From here until
 * it is done the poller makes no CUPTI call. */
static CUptiResult request_teardown(const char **what) {
    CUptiResult r = CUPTI_SUCCESS;
    if (!g_cbids_on) r = set_launch_cbids(true); /* the API exit that tears down */
    CUptiResult f = ga_cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    g_stat_flushes.fetch_add(1, std::memory_order_relaxed);
    ga_report_drops();
    ga_graph_after_flush();
    ga_teardown_request(g_sub);
    g_sub = nullptr;
    g_cbids_on = g_graph_cbs = g_activity_on = g_activity_used = false;
    if (r != CUPTI_SUCCESS) *what = "cuptiEnableCallback";
    else if (f != CUPTI_SUCCESS) *what = "cuptiActivityFlushAll", r = f;
    return r;
}

/* CUPTI brought to g_phase while the shim holds it: at each poll, since CUPTI may
 * have been down at the edge. A count phase turns the launch callbacks on alone;
 * a window, activity too; with teardowns, callbacks left on outside both (a count
 * phase whose window never opened) end in a teardown. */
static CUptiResult apply_phase(uint64_t now, const char **what) {
    if (ga_td_state.load(std::memory_order_acquire) != GA_TD_LIVE) return CUPTI_SUCCESS;
    if (g_phase == GA_PHASE_ON) return ga_window_on.load(std::memory_order_relaxed) ? CUPTI_SUCCESS
                                                                                     : set_collection(true, what);
    if (g_phase == GA_PHASE_COUNT) {
        if (g_cbids_on) return CUPTI_SUCCESS;
        CUptiResult r = set_launch_cbids(true);
        if (r != CUPTI_SUCCESS) *what = "cuptiEnableCallback";
        else ga_window_count_started(now);
        return r;
    }
    if (g_teardowns && g_cbids_on) return request_teardown(what);
    return g_teardowns ? CUPTI_SUCCESS : set_collection(false, what);
}

/* The windows, at each poll while attached: CUPTI up again after a teardown, and
 * at each edge the window's end (with its teardown), the period's records, and
 * the next phase. */
static CUptiResult step_windows(uint64_t now, const char **what) {
    CUptiResult r = CUPTI_SUCCESS;
    if (g_teardowns && ga_td_state.load(std::memory_order_acquire) == GA_TD_DOWN && now >= g_up_retry_ns) {
        r = cupti_up(what);
        if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || r == CUPTI_ERROR_NOT_INITIALIZED) {
            /* Another client took CUPTI between windows (retried next period), or
             * CUPTI does not start again after the finalize: on an H100 it never
             * did in a process with CUDA graphs (one made while CUPTI was down,
             * unseen); retried every period, said once. */
            bool other = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
            g_stat_windows_skipped.fetch_add(1, std::memory_order_relaxed);
            if (!other && ++g_up_failures == 10)
                ga_log("CUPTI does not start again after its teardown in pid %d (%s: %s); no window until "
                       "it does", (int)getpid(), *what, ga_cupti_err(r));
            else
                ga_debug("%s: %s; no window this period", *what, ga_cupti_err(r));
            g_up_retry_ns = now + (other || g_up_failures >= 10 ? (uint64_t)ga_cfg.window_ms * ga_cfg.duty_cycle * 1000000ull
                                                                 : 10000000ull);
            r = CUPTI_SUCCESS;
        } else if (r == CUPTI_SUCCESS) {
            g_up_failures = 0;
        }
    }
    if (r == CUPTI_SUCCESS && now >= g_next_edge_ns.load(std::memory_order_relaxed)) {
        /* An open window's edge is its end: it closes before its period may end, so
         * that every launch made in it is its period's (the last replays left out
         * per window, window.cpp, rely on it). */
        if (g_teardowns && !may_tear_down()) stop_teardowns();
        if (ga_window_on.load(std::memory_order_relaxed)) {
            r = set_collection(false, what);
            if (r == CUPTI_SUCCESS && g_teardowns) r = request_teardown(what);
        }
        uint64_t edge = UINT64_MAX;
        g_phase = ga_window_phase(now, &edge);
        /* counted weights from the period that starts now (this one was extrapolated) */
        if (ga_window_period_ended) ga_window_extrapolate = g_teardowns;
        if (r == CUPTI_SUCCESS && ga_window_period_ended) {
            /* A period ended: its window's records, flushed out of CUPTI now (with
             * teardowns, at the window's end), go to BPF with the period's weight
             * (window.cpp), before the next window's launches can reuse their
             * correlation ids. */
            if (!g_teardowns && ga_td_state.load(std::memory_order_acquire) == GA_TD_LIVE) {
                r = ga_cupti.ActivityFlushAll(0);
                g_stat_flushes.fetch_add(1, std::memory_order_relaxed);
                *what = "cuptiActivityFlushAll";
            }
            ga_window_release_records(true);
        }
        g_next_edge_ns.store(edge, std::memory_order_relaxed);
    }
    if (r == CUPTI_SUCCESS) r = apply_phase(now, what);
    return r;
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
    CUptiResult r = cupti_up(&what);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        static bool logged;
        if (!logged || ga_debug_on)
            ga_log("another CUPTI client is subscribed; retrying every 10 s while the agent is "
                   "attached");
        logged = true;
        g_retry_at_ns = ga_now_ns() + 10ull * 1000000000ull;
        return;
    }
    if (r == CUPTI_ERROR_NOT_INITIALIZED) return; /* CUPTI still coming back from a finalize */
    if (r != CUPTI_SUCCESS) return handle_failure(what, r);
    /* PC sampling (opt-in): modules' cubins from now on, for their line tables. */
    ga_pcs_attach();
    if (ga_pcs_on.load(std::memory_order_relaxed)) {
        r = ga_cupti.EnableCallback(1, g_sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
        if (r != CUPTI_SUCCESS) ga_debug("module-loaded callback not enabled: %s", ga_cupti_err(r));
        ga_pcs_replay(); /* what an earlier attachment set up */
    }
    g_teardowns = may_tear_down() && ga_cfg.duty_cycle > 1 && !ga_audit_on() && !GA_EXP(hold_activity) &&
                  !GA_EXP(cb_windowed) && !GA_EXP(cb_runtime) && !ga_pcs_on.load(std::memory_order_relaxed);
    ga_window_extrapolate = g_teardowns;
    g_pending_error.store(0, std::memory_order_relaxed);
    ga_audit_init();
    uint64_t now = ga_now_ns();
    ga_window_begin(now);
    uint64_t edge = UINT64_MAX;
    g_phase = ga_window_phase(now, &edge);
    r = apply_phase(now, &what);
    if (r != CUPTI_SUCCESS) {
        undo_cupti(true, true);
        return handle_failure(what, r);
    }
    g_next_edge_ns.store(edge, std::memory_order_relaxed);
    g_state.store(ST_ATTACHED, std::memory_order_release);
    g_next_flush_ns = now + (uint64_t)ga_cfg.flush_ms * 1000000ull;
    g_stat_attaches.fetch_add(1, std::memory_order_relaxed);
    g_devices_told = false;
    g_replay_asked = ga_replay_semaphore_value() != 0; /* the attach replayed the names */
    ga_fire_attach_probe();
    ga_debug("attached (pid %d, sample period %u, graph period %u, one %u ms window in %u%s%s)",
             (int)getpid(), ga_cfg.sample_period, ga_cfg.graph_sample_period, ga_cfg.window_ms,
             ga_cfg.duty_cycle, ga_audit_on() ? ", audit" : "", g_teardowns ? ", teardown after each" : "");
}

static void do_detach(const char *why) {
    undo_cupti(true, true);
    g_state.store(ST_IDLE, std::memory_order_release);
    g_stat_detaches.fetch_add(1, std::memory_order_relaxed);
    ga_debug("detached (pid %d): %s", (int)getpid(), why);
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
        int perr = g_pending_error.exchange(0, std::memory_order_acq_rel);
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
            if (asked && !g_replay_asked) {
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
            CUptiResult r = step_windows(now, &what);
            if (r != CUPTI_SUCCESS) {
                do_detach("window edge failed");
                handle_failure(what, r);
                release_busy();
                return;
            }
            if (now >= g_next_flush_ns && ga_td_state.load(std::memory_order_acquire) == GA_TD_LIVE) {
                g_next_flush_ns = now + (uint64_t)ga_cfg.flush_ms * 1000000ull;
                r = ga_cupti.ActivityFlushAll(0);
                g_stat_flushes.fetch_add(1, std::memory_order_relaxed);
                if (r != CUPTI_SUCCESS) {
                    do_detach("flush failed");
                    handle_failure("cuptiActivityFlushAll", r);
                } else {
                    ga_report_drops();
                    ga_graph_after_flush(); /* destroyed graph nodes, now that their records are in */
                }
            }
        }
    }
    release_busy();
}

void ga_report_cupti_error(const char *what, CUptiResult r) noexcept {
    int z = 0;
    if (g_pending_error.compare_exchange_strong(z, (int)r))
        ga_debug("%s: %s (%d)", what, ga_cupti_err(r), (int)r);
}

int ga_session_state(void) noexcept { return g_state.load(std::memory_order_acquire); }

uint64_t ga_session_next_edge_ns(void) noexcept { return g_next_edge_ns.load(std::memory_order_relaxed); }

void ga_session_atfork_child(void) noexcept {
    g_busy.store(0);
    ga_teardown_atfork_child();
}

uint64_t ga_session_stat(int which) noexcept {
    switch (which) {
    case GA_SC_ATTACHES: return g_stat_attaches.load();
    case GA_SC_DETACHES: return g_stat_detaches.load();
    case GA_SC_FLUSHES: return g_stat_flushes.load();
    case GA_SC_WINDOWS: return g_stat_windows.load();
    case GA_SC_WINDOWS_SKIPPED: return g_stat_windows_skipped.load();
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
        if (ga_cfg.duty_cycle > 1 && ga_window_on.load(std::memory_order_relaxed)) {
            ga_window_closed();
            ga_window_on.store(0, std::memory_order_release);
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
             "weighted early, %llu records of unseen launches, %llu launches joined to the window "
             "before them, %llu graph launches left out (%llu records, %llu of them late)",
             (int)getpid(), (unsigned long long)ga_stat_launches.load(),
             (unsigned long long)ga_stat_records.load(), (unsigned long long)ga_stat_dropped.load(),
             (unsigned long long)g_stat_windows.load(),
             (unsigned long long)ga_launch_seq.load(), (unsigned long long)ga_stat_unweighted.load(),
             (unsigned long long)ga_stat_held_overflow.load(), (unsigned long long)ga_stat_unseen.load(),
             (unsigned long long)ga_stat_joined.load(),
             (unsigned long long)ga_stat_left_out_launches.load(),
             (unsigned long long)ga_stat_left_out_records.load(),
             (unsigned long long)ga_stat_left_out_late.load());
#ifdef GA_BENCH_BUILD
    if (GA_EXP(internal))
        ga_debug("internal launches (pid %d): %llu INTERNAL_LAUNCH_API records", (int)getpid(),
                 (unsigned long long)ga_stat_internal_launches.load());
#endif
    if (ga_pcs_wanted()) ga_pcs_log_exit();
    ga_teardown_log_exit();
    if (ga_stat_unseen.load()) {
        char unseen[512];
        ga_unseen_kernels(unseen, sizeof(unseen));
        ga_debug("unseen launches (pid %d), first kernels: %s", (int)getpid(), unseen);
    }
    uint64_t attached_at = ga_window_attached_at();
    if (attached_at && ga_cfg.duty_cycle > 1)
        ga_debug("windows (pid %d): open %.3f %% of %.1f s attached (1/N = %.3f %%); activity "
                 "enable mean %.1f max %.1f us, disable mean %.1f max %.1f us",
                 (int)getpid(), 100.0 * (double)ga_window_time_ns() / (double)(ga_now_ns() - attached_at),
                 (double)(ga_now_ns() - attached_at) / 1e9, 100.0 / ga_cfg.duty_cycle,
                 g_n_enable ? (double)g_enable_ns / (double)g_n_enable / 1e3 : 0.0,
                 (double)g_enable_max_ns / 1e3,
                 g_n_disable ? (double)g_disable_ns / (double)g_n_disable / 1e3 : 0.0,
                 (double)g_disable_max_ns / 1e3);
    release_busy();
}

