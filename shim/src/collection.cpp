/* collection.cpp: what CUPTI collects now, switched by the poller (session.cpp):
 * the subscription (again after every teardown), the launch callbacks, kernel
 * activity and the window flag, following the windows' phases (window.cpp): off,
 * count (launch callbacks alone) and on. With teardowns (the default while
 * windowed) each window ends in a forced flush and a teardown request
 * (teardown.cpp), and the poller subscribes again once it is done; between
 * windows only the graph callbacks are on. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ga_internal.h"
#include "launch_hook.h"
#include "subscription.h"

static std::atomic<uint64_t> g_stat_flushes, g_stat_windows, g_stat_windows_skipped;
static std::atomic<uint64_t> g_next_edge_ns{UINT64_MAX}; /* next window edge (poller wakes) */
/* This attachment tears CUPTI down after every window (teardown.cpp; not with
 * continuous collection, audit mode or PC sampling, which hold activity on, nor
 * once the process has CUDA graphs). */
static bool g_teardowns;
static int g_phase;                             /* GA_PHASE_*, at the last window edge */
static uint64_t g_up_retry_ns;                  /* re-subscription put off until then */
static uint32_t g_up_failures;                  /* NOT_INITIALIZED in a row after a teardown */
static bool g_capture_window;                   /* the open window is an on-demand capture's */
static uint64_t g_tail_until;                   /* a window's tail runs until then (tail.cpp); 0: none */

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
void ga_collect_down(bool activity, bool subscribed) noexcept {
    if (ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN) ga_window_closed();
    if (g_tail_until) ga_tail_end(ga_now_ns());
    g_tail_until = 0;
    /* launches while kernel activity goes off are not the last window's */
    ga_window_on.store(activity && ga_sub.activity_on ? GA_WIN_EDGE : GA_WIN_OFF, std::memory_order_release);
    bool live = ga_td_state.load(std::memory_order_acquire) == GA_TD_LIVE;
    if (live) ga_pcs_stop_all(true); /* no launch callback will stop PC sampling now; its last samples */
    if (live && subscribed && ga_pcs_on.load(std::memory_order_relaxed))
        ga_cupti.EnableCallback(0, ga_sub.handle, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    g_next_edge_ns.store(UINT64_MAX, std::memory_order_relaxed);
    bool teardown = may_tear_down();
    if (live && subscribed && ga_sub.cbids_on && !teardown) ga_sub_launch_cbids(false);
    if (live && activity && ga_sub.activity_on) {
        ga_cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        ga_exp_internal_activity(false);
    }
    ga_sub.activity_on = false;
    ga_window_on.store(GA_WIN_OFF, std::memory_order_release);
    /* Records of the last window may still sit in CUPTI's buffers; with what
     * window.cpp holds they go with the partial period's weight. */
    if (live && activity && ga_sub.activity_used) {
        ga_cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        ga_report_drops();
    }
    if (activity && ga_sub.records_held) ga_window_release_records(false);
    else if (ga_cfg.duty_cycle > 1) ga_published(ga_now_ns(), true); /* nothing held: done */
    ga_sub.activity_used = ga_sub.records_held = false;
    /* Only now: the records flushed above of launches outside windows (kernel
     * activity was held on for PC sampling) were still to be dropped, not weighed. */
    ga_pcs_on.store(0, std::memory_order_relaxed);
    if (live && subscribed) {
        if (teardown) {
            if (!ga_sub.cbids_on) ga_sub_launch_cbids(true); /* their API exits tear down */
            ga_teardown_request(ga_sub.handle);
        } else {
            if (ga_sub.graph_cbs)
                for (unsigned i = 0; i < ga_graph_cbid_count; i++)
                    ga_cupti.EnableCallback(0, ga_sub.handle, CUPTI_CB_DOMAIN_RESOURCE, ga_graph_cbids[i]);
            ga_cupti.Unsubscribe(ga_sub.handle);
            ga_td_state.store(GA_TD_DOWN, std::memory_order_release);
        }
    }
    ga_sub.graph_cbs = ga_sub.cbids_on = false;
    ga_window_callbacks(false, ga_now_ns());
    ga_sub.handle = nullptr;
    ga_graph_reset(); /* graphs destroyed from now on are not reported */
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
    /* the launches while activity goes on are traced, not the window's */
    if (on) ga_window_on.store(GA_WIN_EDGE, std::memory_order_release);
    if (hw_act && (r = ga_sub_activity(true, what)) != CUPTI_SUCCESS) {
        ga_window_on.store(GA_WIN_OFF, std::memory_order_release);
        return r;
    }
    if (on) {
        ga_window_opened(ga_cupti_timestamp());
        ga_sampler_new_window();
        ga_pcs_window_opened(g_stat_windows.load(std::memory_order_relaxed) + 1);
        ga_window_on.store(GA_WIN_OPEN, std::memory_order_release);
        g_stat_windows.fetch_add(1, std::memory_order_relaxed);
        /* rare windows: say when (bench/gpu sticky check); every window at GPU_AGENT_DEBUG=2 */
        if (ga_cfg.duty_cycle >= 100 || ga_budget_on() || ga_debug_on >= 2)
            ga_debug("window opened at %.3f s (CLOCK_MONOTONIC)", (double)ga_now_ns() / 1e9);
    } else {
        if (ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN) ga_window_closed();
        /* and those while it goes off */
        ga_window_on.store(hw_act ? GA_WIN_OFF : GA_WIN_EDGE, std::memory_order_release);
    }
    /* Without teardowns the launch callbacks stay on for the whole attachment:
     * they count every launch, which the record weights need (window.cpp). With
     * teardowns they go on for the count phase (step_windows) and stay on until
     * the teardown. (Experiment GPU_AGENT_EXP_CALLBACKS=windowed: they follow the
     * windows.) */
    if (GA_EXP(cb_windowed) && ga_sub.cbids_on && !on) ga_sub_launch_cbids(false);
    if (!ga_sub.cbids_on && (on || (!GA_EXP(cb_windowed) && !g_teardowns))) {
        r = ga_sub_launch_cbids(true);
        if (r != CUPTI_SUCCESS) {
            *what = "cuptiEnableCallback";
            return r;
        }
    }
    if (hw_act) return CUPTI_SUCCESS;
    r = ga_sub_activity(false, what);
    ga_window_on.store(GA_WIN_OFF, std::memory_order_release);
    return r;
}

static bool g_held;             /* the last re-subscription failed for another client (said once a time) */

/* A process whose graphs came after its attach: from the next period on, its
 * launch callbacks stay on and count every launch (window.cpp's counted
 * weights), and CUPTI stays subscribed until the detach. */
static void stop_teardowns(void) {
    if (!g_teardowns) return;
    g_teardowns = false;
    ga_budget_set_tails(false);
    ga_debug("CUDA graphs in pid %d: CUPTI stays subscribed between windows from now on", (int)getpid());
}

/* After a window: its records out of CUPTI now (forced), then the teardown is
 * asked for; the next launch's API exit runs it (teardown.cpp). From here until
 * it is done the poller makes no CUPTI call. */
static CUptiResult request_teardown(const char **what) {
    CUptiResult r = CUPTI_SUCCESS;
    if (!ga_sub.cbids_on) r = ga_sub_launch_cbids(true); /* the API exit that tears down */
    CUptiResult f = ga_cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    g_stat_flushes.fetch_add(1, std::memory_order_relaxed);
    ga_report_drops();
    ga_graph_after_flush();
    if (!may_tear_down()) { /* a graph replayed in the tail, seen only now by its records */
        stop_teardowns();
        if (r != CUPTI_SUCCESS) *what = "cuptiEnableCallback";
        else if (f != CUPTI_SUCCESS) *what = "cuptiActivityFlushAll", r = f;
        return r;
    }
    ga_teardown_request(ga_sub.handle);
    ga_window_callbacks(false, ga_now_ns());
    ga_sub.handle = nullptr;
    ga_sub.cbids_on = ga_sub.graph_cbs = ga_sub.activity_on = ga_sub.activity_used = false;
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
    if (g_phase != GA_PHASE_PIECE && ga_exp_piece_running()) {
        ga_exp_piece_stopped(ga_now_ns());
        /* its cycle ends before anything else: a piece can end where the count phase
         * begins, which would otherwise run on in the piece's cycle (no count, and
         * the window a second enable in it) */
        if (g_teardowns && ga_sub.cbids_on) return request_teardown(what);
    }
    if (g_phase == GA_PHASE_ON) {
        if (ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN) return CUPTI_SUCCESS;
        g_capture_window = ga_trace_until_ns() > now;
        return set_collection(true, what);
    }
    if (g_phase == GA_PHASE_COUNT) {
        /* not while the last window's tail runs (a count phase in the slot after a
         * window, before the next period's first): kernel activity is still on, and
         * a second enable in the cycle would mix the records' ids (docs/estimator.md) */
        if (ga_sub.cbids_on || g_tail_until) return CUPTI_SUCCESS;
        uint64_t t0 = ga_now_ns();
        CUptiResult r = ga_sub_launch_cbids(true);
        uint64_t on = ga_now_ns(); /* counting starts now, not at the poll's start */
        ga_budget_note_stall(on - t0, false);
        if (r != CUPTI_SUCCESS) *what = "cuptiEnableCallback";
        else {
            ga_tail_fold(); /* the last tail's records are in */
            ga_window_count_started(on);
        }
        return r;
    }
    if (g_phase == GA_PHASE_PIECE) { /* GPU_AGENT_EXP_COUNT=cycle: its cycle's first enable only */
        if (ga_sub.cbids_on || g_tail_until || ga_sub.enables) return CUPTI_SUCCESS;
        CUptiResult r = ga_sub_launch_cbids(true);
        if (r != CUPTI_SUCCESS) *what = "cuptiEnableCallback";
        else ga_exp_piece_started(ga_now_ns());
        return r;
    }
    if (g_teardowns && ga_sub.cbids_on) return request_teardown(what); /* a free piece's cycle ends too */
    return g_teardowns ? CUPTI_SUCCESS : set_collection(false, what);
}

/* A window closes into its tail (tail.cpp): the launch callbacks off, kernel
 * activity still on, for half a slot; then the teardown as after any window. The
 * graph launches' callbacks stay on: a graph replayed while kernel activity is on
 * must be seen, or CUPTI would not start again after the teardown (collection's
 * may_tear_down). */
static CUptiResult begin_tail(uint64_t now, const char **what) {
    ga_window_closed();
    ga_window_on.store(GA_WIN_OFF, std::memory_order_release);
    CUptiResult r = ga_sub_launch_cbids(false, true);
    if (r != CUPTI_SUCCESS) {
        *what = "cuptiEnableCallback";
        return r;
    }
    uint64_t win_ns, win_n, close_ts = ga_cupti_timestamp(), t = ga_now_ns();
    ga_window_last(&win_ns, &win_n);
    ga_tail_begin(t, win_ns, win_n, ga_window_last_busy(), close_ts);
    uint64_t slot = ga_window_period_ns() / (ga_window_slots() ? ga_window_slots() : 1);
    g_tail_until = (t > now ? t : now) + slot / 2;
    return r;
}

/* CUPTI up again after a teardown (at once after it; with the benchmark build's
 * GPU_AGENT_EXP_SUBSCRIBE=late, at the count phase's or window's edge). */
static CUptiResult up_again(uint64_t now, const char **what) {
    CUptiResult r = CUPTI_SUCCESS;
    if (g_teardowns && ga_td_state.load(std::memory_order_acquire) == GA_TD_DOWN && now >= g_up_retry_ns) {
        r = ga_sub_up(what);
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
            else if (other && !g_held)
                ga_log("%s took CUPTI between windows in pid %d; no window until it lets go", ga_collect_holder(),
                       (int)getpid());
            else
                ga_debug("%s: %s; no window this period", *what, ga_cupti_err(r));
            g_held = other;
            g_up_retry_ns = now + (other || g_up_failures >= 10 ? ga_window_period_ns() : 10000000ull);
            r = CUPTI_SUCCESS;
        } else if (r == CUPTI_SUCCESS) {
            if (g_held) ga_log("CUPTI is the shim's again in pid %d", (int)getpid());
            g_up_failures = 0, g_held = false;
        }
    }
    return r;
}

/* The windows, at each poll while attached: CUPTI up again after a teardown, and
 * at each edge the window's end (with its teardown), the period's records, and
 * the next phase. */
static CUptiResult step_windows(uint64_t now, const char **what) {
    /* the launch counter: objects loaded and slots resolved since the last poll */
    if (ga_cfg.launch_counter && ga_window_extrapolate) {
        uint64_t hits = ga_hook_hits();
        uint32_t slots0 = ga_hook_stats_now().slots;
        if (ga_hook_scan()) {
            uint64_t grew = ga_hook_targets_since(slots0);
            ga_window_hook_grew(now, hits, grew);
            ga_shape_grew(now, grew);
        }
    }
    ga_shape_sample(now); /* the launches so far, for the spans' shapes (shape.cpp) */
    ga_mix_sample(now);   /* and per launch function, for the mix's changes (mix.cpp) */
    CUptiResult r = GA_EXP(late_subscribe) ? CUPTI_SUCCESS : up_again(now, what);
    /* An on-demand capture (gpu-agent trace) starts at once, not at the next edge. */
    bool capture = ga_trace_until_ns() > now && ga_window_on.load(std::memory_order_relaxed) != GA_WIN_OPEN;
    /* Between windows, count phases and tails, where the job's launch mix changed: the
     * period ends now (window.cpp's cut), and this poll is its edge. */
    if (r == CUPTI_SUCCESS && !capture && g_phase == GA_PHASE_OFF && !g_tail_until &&
        now < g_next_edge_ns.load(std::memory_order_relaxed) &&
        ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OFF) {
        struct ga_mix_change c;
        if (ga_mix_changed(&c) && ga_window_cut(now, &c))
            g_next_edge_ns.store(now, std::memory_order_relaxed);
    }
    if (r == CUPTI_SUCCESS && (capture || now >= g_next_edge_ns.load(std::memory_order_relaxed))) {
        /* An open window's edge is its end: it closes before its period may end, so
         * that every launch made in it is its period's (the last replays left out
         * per window, window.cpp, rely on it). */
        if (g_teardowns && !may_tear_down()) stop_teardowns();
        if (ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN && g_teardowns && !g_capture_window) {
            r = begin_tail(now, what);
        } else if (ga_window_on.load(std::memory_order_relaxed) == GA_WIN_OPEN) {
            r = set_collection(false, what);
            if (r == CUPTI_SUCCESS && g_teardowns) {
                r = request_teardown(what);
            } else if (r == CUPTI_SUCCESS && g_capture_window) {
                r = ga_cupti.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
                *what = "cuptiActivityFlushAll";
            }
            /* A capture's kernels go now, at its window's weight (about 1), not a
             * period or two later: `gpu-agent trace` waits for them only briefly. */
            if (r == CUPTI_SUCCESS && g_capture_window) ga_window_release_records(false);
            g_capture_window = false;
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
        g_next_edge_ns.store(edge < g_tail_until || !g_tail_until ? edge : g_tail_until, std::memory_order_relaxed);
    }
    if (g_tail_until) { /* the tail holds CUPTI as it is until its end, then tears down */
        if (r != CUPTI_SUCCESS || now < g_tail_until) return r;
        g_tail_until = 0;
        r = set_collection(false, what);
        ga_tail_end(ga_now_ns());
        return r == CUPTI_SUCCESS ? request_teardown(what) : r;
    }
    if (r == CUPTI_SUCCESS && GA_EXP(late_subscribe) && g_phase != GA_PHASE_OFF) r = up_again(now, what);
    if (r == CUPTI_SUCCESS) r = apply_phase(now, what);
    return r;
}

/* ---- what the session asks (session.cpp) ---- */

CUptiResult ga_collect_up(const char **what) noexcept { return ga_sub_up(what); }

void ga_collect_module_callbacks(void) noexcept {
    CUptiResult r = ga_cupti.EnableCallback(1, ga_sub.handle, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    if (r != CUPTI_SUCCESS) ga_debug("module-loaded callback not enabled: %s", ga_cupti_err(r));
}

CUptiResult ga_collect_begin(uint64_t now, const char **what) noexcept {
    g_teardowns = may_tear_down() && ga_cfg.duty_cycle > 1 && !ga_audit_on() && !GA_EXP(hold_activity) &&
                  !GA_EXP(cb_windowed) && !GA_EXP(cb_runtime) && !ga_pcs_on.load(std::memory_order_relaxed);
    ga_budget_set_tails(g_teardowns);
    ga_window_extrapolate = g_teardowns;
    g_tail_until = 0;
    ga_tail_reset();
    ga_window_begin(now);
    ga_shape_reset(now);
    uint64_t edge = UINT64_MAX;
    g_phase = ga_window_phase(now, &edge);
    CUptiResult r = apply_phase(now, what);
    g_next_edge_ns.store(r == CUPTI_SUCCESS ? edge : UINT64_MAX, std::memory_order_relaxed);
    return r;
}

CUptiResult ga_collect_step(uint64_t now, const char **what) noexcept { return step_windows(now, what); }

bool ga_collect_teardowns(void) noexcept { return g_teardowns; }

CUptiResult ga_collect_flush(const char **what) noexcept {
    if (ga_td_state.load(std::memory_order_acquire) != GA_TD_LIVE) return CUPTI_SUCCESS;
    CUptiResult r = ga_cupti.ActivityFlushAll(0);
    g_stat_flushes.fetch_add(1, std::memory_order_relaxed);
    if (r != CUPTI_SUCCESS) {
        *what = "cuptiActivityFlushAll";
        return r;
    }
    ga_report_drops();
    ga_graph_after_flush(); /* destroyed graph nodes, now that their records are in */
    return CUPTI_SUCCESS;
}

uint64_t ga_collect_next_edge_ns(void) noexcept { return g_next_edge_ns.load(std::memory_order_relaxed); }

uint64_t ga_collect_stat(int which) noexcept {
    switch (which) {
    case GA_SC_FLUSHES: return g_stat_flushes.load();
    case GA_SC_WINDOWS: return g_stat_windows.load();
    case GA_SC_WINDOWS_SKIPPED: return g_stat_windows_skipped.load();
    }
    return 0;
}

void ga_collect_log_exit(void) noexcept {
    uint64_t attached_at = ga_window_attached_at();
    double counted, extra;
    ga_window_count_rates(&counted, &extra);
    uint64_t tails, tail_n;
    ga_tail_stats(&tails, &tail_n);
    ga_sub_edges e = ga_sub_edge_stats();
    uint64_t cuts, cuts_paid, cuts_split, cuts_handed;
    ga_window_cut_stats(&cuts, &cuts_paid, &cuts_split, &cuts_handed);
    if (attached_at && ga_cfg.duty_cycle > 1)
        ga_debug("windows (pid %d): open %.3f %% of %.1f s attached (1/N = %.3f %%); activity "
                 "enable mean %.1f max %.1f us, disable mean %.1f max %.1f us; %llu skipped; "
                 "count phases %.0f launches/s, between windows extrapolated at %.0f; "
                 "%llu tails (%llu launches), launch callbacks %.0f ns a launch; "
                 "%llu periods cut where the launch mix changed (%llu after their window); where it changed, %llu "
                 "gave the part before to the period before, %llu the part after to the next",
                 (int)getpid(), 100.0 * (double)ga_window_time_ns() / (double)(ga_now_ns() - attached_at),
                 (double)(ga_now_ns() - attached_at) / 1e9, 100.0 / ga_cfg.duty_cycle,
                 e.enable_mean_us, e.enable_max_us, e.disable_mean_us, e.disable_max_us, (unsigned long long)g_stat_windows_skipped.load(), counted, extra,
                 (unsigned long long)tails, (unsigned long long)tail_n, ga_budget_callback_ns(counted / 1e9),
                 (unsigned long long)cuts, (unsigned long long)cuts_paid, (unsigned long long)cuts_split,
                 (unsigned long long)cuts_handed);
    ga_hook_stats h = ga_hook_stats_now();
    if (attached_at && ga_cfg.duty_cycle > 1 && ga_cfg.launch_counter) {
        char what[512];
        ga_hook_describe(what, sizeof(what));
        ga_debug("launch counter (pid %d): %u slots in %u objects, %u left alone, %.1f MB of data searched, scans %.1f ms; "
                 "%llu pointers handed out by dlsym; %llu hits%s%s",
                 (int)getpid(), h.slots, h.objects, h.refused, (double)h.data_bytes / 1e6, (double)h.scan_ns / 1e6,
                 (unsigned long long)h.handouts, (unsigned long long)ga_hook_hits(), *what ? ": " : "", what);
    }
}
