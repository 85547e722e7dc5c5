/* window.cpp: duty-cycled collection ("collection windows"); audit mode's tallies
 * live in audit.cpp.
 *
 * Why: CUPTI's CONCURRENT_KERNEL activity costs GPU time on every kernel
 * (~0.4 us each on an H200: +14 % on a replay of tiny-kernel graphs) and CPU time
 * on every launch. So while an agent is attached the shim traces kernels only
 * inside windows: time is cut into periods of N slots, and in every period ONE
 * slot, drawn uniformly at random, is "on" (kernel activity enabled, launches
 * sampled for stacks); the other N-1 are off. Every instant of a period is
 * therefore inside a window with probability exactly 1/N, whatever the
 * workload's own period. N and the slot's length are planned period by period
 * under the cost budget (budget.cpp), or fixed by GPU_AGENT_DUTY_CYCLE and
 * GPU_AGENT_WINDOW_MS. Each windowed record weighs its period's launches / its
 * window's launches (about N; see "record weights" below), not N alone: a window
 * slows the launches made in it. N = 1 is continuous, exact collection.
 *
 * Audit mode (GPU_AGENT_AUDIT_FILE=path; for benchmarks): activity stays on all
 * the time, so the shim sees the full trace; windows are still drawn, launches
 * made inside one are marked (by correlation id), and only their records are
 * forwarded to BPF, weighted as usual. At exit the shim writes, per kernel, the
 * full trace's launches and GPU ns next to the windowed ones: the ground truth
 * for the agent's estimate OF THE SAME RUN.
 *
 * The schedule runs on the poller thread only; the launch callback and the
 * activity thread only read ga_window_on, the counters and the audit bitmap. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ga_internal.h"
#include "launch_hook.h"

std::atomic<int> ga_window_on;

static uint64_t g_period_start_ns; /* start of the current period */
static unsigned g_on_slot;         /* the slot of the current period that is on */
static unsigned g_next_on_slot;    /* the next period's (its count phase may start in this one) */
/* The current and the next period's slots, and their length (budget.cpp plans them). */
static uint32_t g_slots = 1, g_next_slots = 1;
static uint64_t g_slot_ns, g_next_slot_ns;
static uint64_t g_rng;
/* Attach time and window time so far (the exit line's window share); ga_now_ns. */
static std::atomic<uint64_t> g_attach_ns, g_win_closed_ns, g_win_open_ns;


static uint64_t slot_ns(void) { return g_slot_ns; }


/* The period that ends (end_period): its span as counted, from the poll that began it
 * to the poll that ends it. A late poll (a loaded host, a stalled poller) ends a period
 * after its planned edge; its counts (snapshots of the counter, the busy clock, the
 * callbacks) run to the poll, so its span and the next one's start are the poll's, not
 * the plan's: a poll 64 ms late put a counted period's launches over a span 64 ms
 * short, +10.9 % against the job's own log (tests/test_launch_counter.py, beside
 * another agent), and the agent splits a period over intervals by its span. */
static uint64_t g_period_len_ns;
static uint64_t g_period_at_ns; /* when the current period began, as counted (ga_now_ns) */
/* With teardowns, each period ends a random part of a slot after its N slots, so
 * that the grid of windows and count phases holds no fixed phase of a periodic
 * workload (count phases that always met a 5 ms burst loop at the same phase read
 * it 10 % high). */
static uint64_t g_jitter_ns;
static uint64_t period_ns(void) { return slot_ns() * g_slots + g_jitter_ns; }

static void draw_next(bool first) {
    ga_budget_plan(first, &g_next_slots, &g_next_slot_ns);
    /* The first period's window never takes its first slot, so that a count phase
     * comes before it and the budget measures the window's slowdown at once. */
    bool skip = first && ga_budget_on() && g_next_slots > 1;
    g_next_on_slot = (unsigned)(skip + ga_splitmix64(&g_rng) % (g_next_slots - skip));
}
static uint64_t g_count_t0, g_count_seq0; /* the count phase's start (0: none) */
static double g_rate = -1;                 /* launches per ns of the last count phase; < 0: none */
/* The count phase's rate before the last one: a count phase that saw no launch
 * while its window saw some (its callbacks did not fire: CUPTI fires a callback
 * after its first three enables since a finalize only, and a teardown can be
 * skipped) reads 0 for a busy job: the rate before it stands then. */
static double g_prev_rate = -1;
/* For the budget's measure of a window's slowdown: the launch counter and time at
 * the last window's opening and closing, the undisturbed rate and count phase then. */
static uint64_t g_open_seq, g_open_seq_ns, g_closed_seq, g_closed_ns, g_count_n, g_count_ns;
static double g_base_rate = -1;
static uint64_t g_period_win_ns;           /* window time in the current period */
static uint64_t g_last_win_ns, g_last_win_n; /* the last window's length (less its samples') and launches */
static uint64_t g_open_sample_ns;            /* ga_sample_ns at its opening */
static ga_span g_callbacks;                 /* the launch callbacks on, this period */
static bool g_period_had_window;
/* The busy clock (busy.cpp: the launching threads' CPU ns): at the period's start,
 * over the callbacks' spans, at the count phase's start; the launches per busy ns of
 * the last count phase whose threads were busy (and the one before); the edges so
 * far (its threads change only there); whether it stands for the current period. */
static uint64_t g_busy_p0, g_count_busy0, g_edges, g_count_edge;
static ga_span g_callbacks_busy;
static double g_lpb = -1, g_prev_lpb = -1;
static uint64_t g_win_busy0, g_last_win_busy; /* at the window's opening; the last one's, less its samples' */
static double g_win_lpb = -1; /* launches per busy ns of the last window whose threads were busy */
static uint64_t g_count_busy; /* the last count phase's busy ns (the debug line) */
/* Busy time of periods whose window never opened, outside their callbacks: CUPTI
 * was still down (its teardown waits for an API call: a job that idled over a window
 * and then starts) or held by another client. Nothing counted their launches; the
 * next period's rate per busy ns does, and they join the pending period whose span
 * covers them (weights.cpp), or this one's where none is pending. */
static double g_carry_busy, g_carry_hits; /* and the launch counter's hits there, before it was calibrated */
static double g_carry_clocks;              /* periods waiting for the counter's calibration: the clocks' estimate */
static unsigned g_carry_periods;
static bool g_busy_on;
/* The launch counter (launch_hook.cpp): its hits at the period's start and over the
 * callbacks' spans; launches per hit of the last period that calibrated it (-1: it
 * sees too few of the launches, the clocks stand; HOOK_UNDECIDED: none yet). */
static uint64_t g_hook_p0, g_hook_epoch0; /* and the counter's coverage (ga_hook_epoch) then */
static ga_span g_callbacks_hook;
#define HOOK_UNDECIDED -2.0 /* no period has told yet */
#define HOOK_WAIT_PERIODS 4
static double g_hook_ratio = HOOK_UNDECIDED;
/* A period in which the counter's slots grew (a table the data search found; cuBLAS's
 * at an H200 Llama's first generate): its hits mix two coverages. The first growth's
 * time, the counter's hits then and those over the callbacks' spans until then (0: none
 * this period). Its hits before it go at the ratio that stood; its hits after it wait
 * for the next calibration (a wait, below), and join the pending period (its span
 * covers them). At the clocks, all of it read +46 % on the H200: the count phase went
 * at 48 000 launches/s, the period at 34 000/s. */
static uint64_t g_grew_ns, g_grew_hits, g_grew_on, g_grew_cb_ns; /* and the callbacks' time on until then */
/* Per counted function: hits at the period's start, at its first growth, and at the
 * latest growth (the coverage has stood since); the functions the period's first growth
 * gave slots to, and those its later ones did. */
static uint64_t g_p0_each[GA_HOOK_TARGETS], g_grew_each[GA_HOOK_TARGETS], g_last_grew_each[GA_HOOK_TARGETS];
static uint64_t g_grew_first, g_grew_later;
/* Hits that wait for a calibration: each stretch of a grown period on either side of
 * its growth, per counted function, with the share of them made while the callbacks
 * were off (their launches are the ones to add), the clocks' estimate of them (where
 * no calibration comes within HOOK_WAIT_PERIODS periods), and the functions that
 * gained slots after them (mask). Where no ratio stood at the growth (a process whose
 * first periods each added slots: an H200 Llama's), the hits before it wait too, and
 * periods that grow in a row add theirs: hits under an older coverage were a smaller
 * share of the launches, which the counted functions' mix tells. A function no growth
 * since gave a slot kept its coverage, so its share of the hits since the last growth
 * (of all) scales a stretch's hits of it. At the clocks such a period read +45 % on
 * the H200 (the count phase's 43 000 launches/s stood for the 0.9 s before the growth,
 * in which the first generate launched little), and the one before it, whose hits
 * went at the clocks as the next period grew again, -98 %. */
struct grew_wait {
    uint64_t d[GA_HOOK_TARGETS];
    uint64_t mask;
    double off, clocks, end_s;
};
#define GREW_WAITS 8
static grew_wait g_waits[GREW_WAITS];
static unsigned g_n_waits, g_wait_periods;
static double g_waits_spilled; /* the clocks' estimate of stretches that found no room */

static void hits_each(uint64_t *out) {
    memset(out, 0, sizeof(uint64_t) * GA_HOOK_TARGETS);
    ga_hook_hits_each(out, GA_HOOK_TARGETS);
}

/* Of one stretch's hits per counted function, those outside `mask` (0: all). */
static double hits_outside(const uint64_t *d, uint64_t mask) {
    double n = 0;
    for (unsigned i = 0; i < GA_HOOK_TARGETS; i++)
        if (!(mask >> i & 1)) n += (double)d[i];
    return n;
}

/* A stretch's hits (from `from` to `to`), `off` of them made while the callbacks were off. */
static void wait_for_calibration(const uint64_t *to, const uint64_t *from, uint64_t mask, double off, double clocks,
                                 double end_s) {
    if (g_n_waits == GREW_WAITS) {
        g_waits_spilled += clocks;
        return;
    }
    grew_wait &w = g_waits[g_n_waits++];
    for (unsigned i = 0; i < GA_HOOK_TARGETS; i++) w.d[i] = to[i] >= from[i] ? to[i] - from[i] : 0;
    double all = hits_outside(w.d, 0);
    w.mask = mask, w.off = all > 0 ? (off < all ? off : all) / all : 0, w.clocks = clocks, w.end_s = end_s;
}

/* The waiting stretches' launches, at `ratio` (a calibration: > 0) scaled by their
 * coverage, or at their clocks; each joins the pending period. Returns those that found
 * none pending (the period's own count takes them). None waits after. */
static double take_waits(double ratio) {
    double unjoined = 0;
    uint64_t now[GA_HOOK_TARGETS];
    hits_each(now);
    for (unsigned k = 0; k <= g_n_waits; k++) {
        double n = g_waits_spilled, end_s = 0;
        if (k < g_n_waits) {
            const grew_wait &w = g_waits[k];
            double all, kept;
            ga_hook_split(now, g_last_grew_each, w.mask, &all, &kept);
            n = ratio > 0 && kept >= GA_HOOK_MIN_HITS ? ratio * w.off * hits_outside(w.d, w.mask) * all / kept
                                                       : w.clocks;
            end_s = w.end_s;
        }
        if (n < 0.5) continue;
        bool joined = ga_weights_add_to_pending((uint64_t)(n + 0.5));
        if (!joined) unjoined += n;
        if (ga_debug_on >= 2 && k < g_n_waits) /* tests/support/windows.py adds them to that period's line */
            ga_debug("period (pid %d): %.0f launches more for the period that ended at %.6f s%s", (int)getpid(), n,
                     end_s, joined ? "" : " (in this one's count)");
    }
    g_n_waits = 0, g_wait_periods = 0, g_waits_spilled = 0;
    return unjoined;
}

/* ---- cuts: a period that ends where the launchers' mix changed (mix.cpp) ----
 * A period's one window stands for its kernel mix, so a job that runs other code
 * from some point of a period on gets the window's side of it for all of the
 * period. Ending the period there gives each side a period of its own. The rule:
 *  - a cut before its period's window costs nothing: that part, window-less,
 *    joins the pending period before it (weights.cpp), whose window saw the mix
 *    before the change. At most FREE_CUTS of them in a row, with no window
 *    between: cuts never keep a job out of windows (the coverage floor holds);
 *  - a cut after it ends a period whose window stood for less time than the budget
 *    planned: the rest of the period (g_cut_debt_ns) is added to the next period as
 *    whole slots, its window drawn over all of them, up to GA_PERIOD_MAX_NS, so
 *    that windows come no more often than the budget's plan (a debt is never more
 *    than one period's rest: it moves on whole, and cutting again moves what is left);
 *  - a period whose window opened after the change (the poll that parts the two
 *    sides best, mix.cpp) saw the new side: its part before the change is the old
 *    side's, and joins the pending period (its launches: the counter's hits there,
 *    where it is calibrated); otherwise that part went under the new side's
 *    kernels, up to a whole period. A window open across the change does the same
 *    with its launches after the change only (those before leave its count, and
 *    their records go): its records otherwise stood for both sides in the share
 *    they held in the window, not in the period. And a period that ends as planned
 *    looks for a change in its last polls too, too recent for a cut (whose rule is
 *    RECENT_NS of the new side), which a split needs no more than one poll of: on
 *    the mock, a window 15 ms after a change 130 ms before its period's end put
 *    the period's other 0.9 s under the new side;
 *  - the new period's window takes its second slot, the first being its count
 *    phase: the side that starts at a cut gets its window at once. Drawn at random
 *    over the period's slots (as planned periods' are), it came after the next
 *    change or the process's exit often enough that the side between had no window
 *    at all: its launches joined the pending period, whose window saw the side
 *    before (the mock's loop that changes path every 2 s read single 1 s intervals
 *    75-100 % wrong, one run in about 12). A side's mix is steady by the rule
 *    that cuts it, so where in the side its window falls matters no more. */
#define FREE_CUTS 4
static bool g_cutting;
static unsigned g_free_cuts; /* cuts before their window since the last window closed */
static uint64_t g_cut_debt_ns, g_cuts, g_cuts_paid, g_cuts_split, g_cuts_handed;
static uint64_t g_period_opened_ns; /* when the period's window opened (ga_now_ns; 0: not yet) */

static bool split_at_change(const struct ga_mix_change &c);

static void new_period(uint64_t start, bool first) {
    /* A planned end: a change too recent for a cut may still have put the window on
     * its new side (split_at_change). */
    struct ga_mix_change c;
    if (!first && !g_cutting && ga_window_extrapolate && ga_mix_changed_lately(&c)) split_at_change(c);
    uint64_t at = ga_now_ns(); /* the counts' edge: at or after the planned start */
    if (at < start) at = start;
    g_period_len_ns = first ? 0 : at - g_period_at_ns;
    g_period_start_ns = start, g_period_at_ns = at;
    if (first) draw_next(true);
    g_on_slot = g_next_on_slot;
    g_slots = g_next_slots, g_slot_ns = g_next_slot_ns;
    draw_next(false);
    g_jitter_ns = ga_window_extrapolate && slot_ns() ? ga_splitmix64(&g_rng) % slot_ns() : 0;
    ga_exp_piece_plan(start, period_ns(), slot_ns(), start + g_on_slot * slot_ns(), &g_rng);
    ga_weights_period_edge(first, ga_window_slots(), ga_window_extrapolated, at);
    ga_busy_period_edge(); /* the threads seen launching in the ended period sum from here */
    g_edges++;
    g_busy_p0 = ga_busy_now();
    g_busy_on = ga_busy_usable();
    if (first && ga_cfg.launch_counter && ga_window_extrapolate) ga_hook_scan(); /* then at each poll */
    g_hook_p0 = ga_hook_hits(), g_hook_epoch0 = ga_hook_epoch();
    if (ga_cfg.launch_counter) hits_each(g_p0_each);
    g_grew_ns = 0, g_grew_first = g_grew_later = 0;
    ga_mix_reset(start);
}

void ga_window_hook_grew(uint64_t now_ns, uint64_t hits, uint64_t targets) noexcept {
    for (unsigned k = 0; k < g_n_waits; k++) g_waits[k].mask |= targets; /* they came before it */
    hits_each(g_last_grew_each);
    if (ga_debug_on >= 2)
        ga_debug("launch counter (pid %d): slots grew at %.6f s, in the period from %.6f s", (int)getpid(),
                 (double)now_ns / 1e9, (double)g_period_start_ns / 1e9);
    if (now_ns <= g_period_start_ns) return;
    if (g_grew_ns) { /* the first growth of the period parts it; a later one's functions changed too */
        g_grew_later |= targets;
        return;
    }
    g_grew_ns = now_ns, g_grew_hits = hits, g_grew_on = g_callbacks_hook.peek(hits + 1);
    g_grew_cb_ns = g_callbacks.peek(now_ns);
    g_grew_first = targets;
    memcpy(g_grew_each, g_last_grew_each, sizeof g_grew_each);
}

void ga_window_begin(uint64_t now_ns) noexcept {
    g_rate = g_prev_rate = -1, g_count_t0 = 0, g_period_win_ns = 0, g_period_had_window = false;
    g_closed_ns = 0, g_callbacks = g_callbacks_busy = {};
    g_lpb = g_prev_lpb = g_win_lpb = -1, g_count_busy0 = g_last_win_busy = 0, g_busy_on = false;
    g_callbacks_hook = {};
    g_free_cuts = 0, g_cut_debt_ns = 0;
    ga_busy_reset();
    /* The attach's first edge takes the snapshots (weights.cpp's period_counts, which
     * runs ga_window_extrapolated): from here, not from the last attachment's last
     * period (whose launches a stop and a start on an H200 counted twice: +14 %). */
    g_hook_p0 = ga_hook_hits(), g_busy_p0 = ga_busy_now();
    g_attach_ns.store(now_ns, std::memory_order_relaxed);
    g_win_closed_ns.store(0, std::memory_order_relaxed);
    g_win_open_ns.store(0, std::memory_order_relaxed);
    if (!g_rng) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g_rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    }
    new_period(now_ns, true);
    /* what the snapshots left */
    g_carry_busy = g_carry_hits = g_carry_clocks = 0, g_carry_periods = 0, g_hook_ratio = HOOK_UNDECIDED;
    g_n_waits = 0, g_wait_periods = 0, g_waits_spilled = 0;
    /* The agent holds its intervals from here on for this process's periods. */
    if (ga_cfg.duty_cycle > 1) ga_published(now_ns, false);
}

bool ga_window_should_be_on(uint64_t now_ns, uint64_t *next_edge_ns) noexcept {
    if (ga_cfg.duty_cycle <= 1) {
        *next_edge_ns = UINT64_MAX;
        return true;
    }
    /* An on-demand capture (gpu-agent trace): one window until its deadline. Its
     * launches all fall in the window, so its period weighs about 1. */
    uint64_t until = ga_trace_until_ns();
    if (now_ns < until) {
        *next_edge_ns = until;
        return true;
    }
    uint64_t s = slot_ns();
    /* A poller that slept past whole periods starts a fresh one now: the
     * periods it missed were off, and were never going to be collected. */
    if (now_ns >= g_period_start_ns + period_ns()) {
        uint64_t next = g_period_start_ns + period_ns();
        if (now_ns >= next + s * g_slots) next = now_ns - (now_ns - next) % (s * g_slots);
        new_period(next, false);
    }
    uint64_t period = period_ns();
    uint64_t on_lo = g_period_start_ns + g_on_slot * s, on_hi = on_lo + s;
    if (now_ns < on_lo) {
        *next_edge_ns = on_lo;
        return false;
    }
    if (now_ns < on_hi) {
        *next_edge_ns = on_hi;
        return true;
    }
    *next_edge_ns = g_period_start_ns + period; /* the next period may start on */
    return false;
}

/* Where the mix changed at c inside the period that ends now, each side goes with a
 * window that saw it. Its window saw the new side (it opened after the change, or
 * was open across it: its launches before the change then leave its count, and
 * their records go): the part before the change goes to the pending period, whose
 * window saw the old side (a split). Its window closed before the change, or it had
 * none: the part after the change goes on to the next period's window (a hand-on;
 * before, that part went under the old side's kernels, 60-200 ms of the mock's turns:
 * 6-8 % of each 1 s interval with a turn). */
static bool split_at_change(const struct ga_mix_change &c) {
    bool after = g_period_opened_ns >= c.since_ns;
    bool across = !after && g_period_opened_ns && g_closed_ns > c.since_ns;
    if (c.since_ns <= g_period_start_ns || g_hook_ratio <= 0 || ga_hook_epoch() != g_hook_epoch0 ||
        c.hits_since <= g_hook_p0)
        return false;
    /* its window saw the old side, or it had none (its launches join the pending
     * period, whose window did): the part after the change goes on to the next window */
    if (!g_period_had_window || (!after && !across)) {
        uint64_t hits = ga_hook_hits();
        if (hits <= c.hits_since) return false;
        ga_weights_hand_on(c.since_ns, g_hook_ratio * (double)(hits - c.hits_since));
        g_cuts_handed++;
        return true;
    }
    ga_weights_split(c.since_ns, g_hook_ratio * (double)(c.hits_since - g_hook_p0), across ? c.in_since : 0,
                     across ? c.corr_since : 0);
    g_cuts_split++;
    return true;
}

bool ga_window_cut(uint64_t now_ns, const struct ga_mix_change *c) noexcept {
    if (ga_cfg.duty_cycle <= 1 || !ga_window_extrapolate) return false;
    uint64_t end = g_period_start_ns + period_ns();
    if (now_ns >= end || now_ns <= g_period_start_ns || (!g_period_had_window && g_free_cuts >= FREE_CUTS)) return false;
    if (g_period_had_window) g_cut_debt_ns += end - now_ns, g_cuts_paid++;
    else g_free_cuts++;
    split_at_change(*c);
    if (g_cut_debt_ns && g_next_slot_ns) {
        uint64_t room = GA_PERIOD_MAX_NS / g_next_slot_ns, add = g_cut_debt_ns / g_next_slot_ns;
        if (g_next_slots + add > room) { /* at the ceiling: the rest is let go */
            add = room > g_next_slots ? room - g_next_slots : 0;
            g_cut_debt_ns = 0;
        } else {
            g_cut_debt_ns -= add * g_next_slot_ns;
        }
        g_next_slots += (uint32_t)add;
    }
    g_next_on_slot = g_next_slots > 1 ? 1 : 0;
    if (ga_debug_on >= 2) /* a window-less period has no period line: its cut says so here */
        ga_debug("cut (pid %d): at %.6f s (CLOCK_MONOTONIC), %s its window", (int)getpid(), (double)now_ns / 1e9,
                 g_period_had_window ? "after" : "before");
    g_cutting = true;
    new_period(now_ns, false);
    g_cutting = false;
    g_cuts++;
    return true;
}

void ga_window_cut_stats(uint64_t *cuts, uint64_t *after_window, uint64_t *split, uint64_t *handed) noexcept {
    *cuts = g_cuts, *after_window = g_cuts_paid, *split = g_cuts_split, *handed = g_cuts_handed;
}

/* ---- the count phase (teardowns between windows) ----
 * With CUPTI torn down between windows (teardown.cpp) no callback counts the
 * launches there. So the launch callbacks go on alone for a count phase, the slot
 * just before each window (no kernel activity yet, and none of its residual since
 * the last finalize), and the period's launches are extrapolated from that rate
 * (period_counts). A whole slot, on the slots' grid: every instant is in a count
 * phase with probability 1/N, as in a window. (A count phase of random length
 * ending at the window read a loop that launched in bursts every 5 ms 5-7 % high:
 * its end sat at a fixed phase of the bursts.) When the window before sits in
 * that slot, there is no count phase, and the last rate stands. */
bool ga_window_extrapolate;
static std::atomic<uint64_t> g_period_td_ns; /* teardown stalls since the last period's count */
static double g_extra_n, g_extra_ns;         /* launches extrapolated, and over what time (exit line) */
static uint64_t g_counted_n, g_counted_ns;   /* launches and time of all count phases (exit line) */

void ga_window_note_teardown(uint64_t ns) noexcept { g_period_td_ns.fetch_add(ns, std::memory_order_relaxed); }

int ga_window_phase(uint64_t now_ns, uint64_t *next_edge_ns) noexcept {
    if (ga_window_should_be_on(now_ns, next_edge_ns)) return GA_PHASE_ON;
    if (!ga_window_extrapolate || *next_edge_ns == UINT64_MAX) return GA_PHASE_OFF;
    uint64_t period_end = g_period_start_ns + period_ns();
    /* the next window opens at this period's on slot, or at the next period's;
     * its count phase is one slot of that period's */
    bool here = *next_edge_ns < period_end;
    uint64_t s = here ? slot_ns() : g_next_slot_ns;
    uint64_t on_lo = here ? *next_edge_ns : period_end + g_next_on_slot * s;
    uint64_t count_lo = on_lo > s ? on_lo - s : 0;
    if (now_ns >= count_lo) {
        if (on_lo < *next_edge_ns) *next_edge_ns = on_lo;
        return GA_PHASE_COUNT;
    }
    if (count_lo < *next_edge_ns) *next_edge_ns = count_lo;
    return ga_exp_piece(now_ns, next_edge_ns) ? GA_PHASE_PIECE : GA_PHASE_OFF;
}



void ga_window_callbacks(bool on, uint64_t now_ns) noexcept {
    uint64_t busy = ga_busy_now(), hits = ga_hook_hits() + 1; /* + 1: a span at 0 is off */
    if (on) g_callbacks.on(now_ns), g_callbacks_busy.on(busy), g_callbacks_hook.on(hits);
    else g_callbacks.off(now_ns), g_callbacks_busy.off(busy), g_callbacks_hook.off(hits);
}

/* The period's launches with teardowns between windows (weights.cpp's counts:
 * `in` in its window, `seen` by the callbacks at all), and the period's window
 * time starts again. The callbacks saw every launch while they were on (the count
 * phase, the window, the launches before the teardown): the rest of the period
 * goes at the count phase's rate without the callbacks' cost (the window's own,
 * slower rate before any count phase), and the windows' tails at the window's rate
 * without it (tail.cpp). A period whose window never opened has only what the
 * callbacks saw: none when its process made no launch since the last teardown,
 * none either when another CUPTI client held the subscription
 * (GA_SC_WINDOWS_SKIPPED counts those). But a partial period at a detach or exit
 * (`final`), whose window was still to come, goes at the last rate. */
/* Launches per ns at `ns_per_launch` less the callbacks' `cb_ns`, at most `cap`
 * (the tails' rate, on either clock). */
static double without_callbacks(double ns_per_launch, double cb_ns, double cap) {
    double per = ns_per_launch - cb_ns;
    return per > 0 && 1.0 / per < cap ? 1.0 / per : cap;
}

/* The launch counter against the callbacks, over the period's spans where they were on
 * (its count phase, its window, the launches before its teardown): launches per hit, used
 * where the counter saw a quarter of them at least (a launcher it does not see, such
 * as cuBLAS's, is scaled in as long as the mix holds: an MLP of Linear + GELU reads
 * 2.0 on an H200); under a quarter (Triton's launches, torch.compile: it sees none)
 * the clocks stand. Callbacks that saw fewer launches than the counter (CUPTI fires
 * them after three enables since a finalize only), or too few to tell, leave the last
 * ratio standing. A ratio, not a rate: the window's slower launches read the same. */
static bool calibrate_hook(uint64_t launches, uint64_t hits) {
    if (!launches || (launches < GA_HOOK_MIN_HITS && hits < GA_HOOK_MIN_HITS && hits != launches)) return false;
    double q = hits ? (double)launches / (double)hits : 1e9;
    if (q >= 0.95) g_hook_ratio = q <= 4.0 ? q : -1;
    return q >= 0.95;
}

uint64_t ga_window_extrapolated(uint64_t in, uint64_t seen, bool final) noexcept {
    uint64_t all = seen;
    ga_shape_measure(GA_SHAPE_SEQ); /* the callbacks saw every launch */
    if (ga_window_extrapolate) {
        uint64_t now = ga_now_ns(), len = final ? now - g_period_at_ns : g_period_len_ns;
        uint64_t counted = g_callbacks.take(now), held = g_period_td_ns.exchange(0, std::memory_order_relaxed);
        double tail = (double)ga_tail_period_ns(now);
        /* uncounted: the rest, less what the thread spent tearing CUPTI down (it
         * launched nothing then) */
        double rest = (double)len - (double)counted - (double)held;
        if (rest < 0) rest = 0;
        if (tail > rest) tail = rest;
        rest -= tail;
        double win_rate = g_period_win_ns ? (double)in / (double)g_period_win_ns : 0;
        uint64_t piece_n, piece_ns; /* GPU_AGENT_EXP_COUNT=cycle: pooled with the count phase */
        ga_exp_piece_take(&piece_n, &piece_ns);
        if (piece_ns >= 1000000 && g_count_ns)
            g_rate = (double)(g_count_n + piece_n) / (double)(g_count_ns + piece_ns);
        double count = g_rate == 0 && in ? (g_prev_rate > 0 ? g_prev_rate : win_rate) : g_rate;
        double rate = count >= 0 ? count / (1.0 - ga_budget_count_bias(count)) : win_rate;
        /* the window's time per launch (less its samples') without the callbacks' */
        double tail_rate = rate;
        if (g_last_win_n && win_rate > 0)
            tail_rate = without_callbacks((double)g_last_win_ns / (double)g_last_win_n,
                                          ga_budget_callback_ns(g_rate >= 0 ? g_rate : win_rate), rate);
        /* On the busy clock where it stands: the rest goes at the count phase's
         * launches per busy ns (corrected as above) times the launching threads' CPU
         * time in it, so that a part of the period where they idled adds nothing; the
         * tails at the last window's launches per busy ns without the callbacks'. */
        uint64_t b = ga_busy_now();
        double busy_len = (double)(b - g_busy_p0), busy_on = (double)g_callbacks_busy.take(b);
        double busy_tail = (double)ga_tail_period_busy();
        double busy_rest = busy_len - busy_on - busy_tail - (double)held;
        double lpb = g_lpb == 0 && in ? g_prev_lpb : g_lpb;
        const char *lpb_from = g_lpb == 0 && in ? "the count phase before" : "the count phase";
        /* before any count phase caught the threads busy, the last busy window's
         * (slowed by its activity, as win_rate is) */
        if (lpb < 0) lpb = g_win_lpb, lpb_from = "the last busy window";
        double lpb_raw = lpb;
        bool busy = g_busy_on && lpb >= 0;
        if (busy_rest < 0) busy_rest = 0;
        /* The launch counter, where it is calibrated: the launches made while the
         * callbacks were off are its hits there times the launches per hit (the
         * tails' among them), whatever the rate did, and a part where nothing
         * launched adds nothing. */
        uint64_t hits = ga_hook_hits() + 1, hits_on = g_callbacks_hook.take(hits);
        /* Slots counted since the period began (a table the data search found): its
         * hits mix two coverages, and no one ratio stands for them (on an H200 such
         * periods read up to +490 %): it does not calibrate, and each side of the
         * growth goes on its own (g_grew_ns, below), or at the clocks. */
        bool moved = ga_hook_epoch() != g_hook_epoch0;
        bool calibrated = !moved && calibrate_hook(seen, hits_on);
        double hook_rest = (double)(hits - 1 - g_hook_p0) - (double)hits_on;
        bool hooked = g_hook_ratio > 0 && !moved;
        /* the hits are the launches' shape where the counter is calibrated (a growth
         * inside a span is shape.cpp's), and may be where it waits for its first
         * calibration (where they are most of the span's launches) */
        bool undecided = g_hook_ratio == HOOK_UNDECIDED && ga_cfg.launch_counter;
        ga_shape_measure(g_hook_ratio > 0 ? GA_SHAPE_HITS : undecided ? GA_SHAPE_HITS_WAITING : GA_SHAPE_NONE);
        if (hook_rest < 0) hook_rest = 0;
        double tail_n = tail_rate * tail, rest_n = rate * rest;
        if (busy) {
            lpb /= 1.0 - ga_budget_count_bias(lpb);
            rest_n = lpb * busy_rest;
            /* the window-less periods before: to the pending period they joined */
            double carried = (g_period_had_window || final) && !hooked ? lpb * g_carry_busy : 0;
            if (carried >= 0.5 && !ga_weights_add_to_pending((uint64_t)(carried + 0.5))) rest_n += carried;
            double tail_lpb = lpb;
            if (g_last_win_n && g_last_win_busy)
                tail_lpb = without_callbacks((double)g_last_win_busy / (double)g_last_win_n, ga_budget_callback_ns(lpb),
                                             lpb);
            tail_n = tail_lpb * busy_tail;
            if (rest > 0) rate = rest_n / rest; /* per second of the rest, as it went */
        }
        double clocks_n = rest_n + tail_n; /* what the clocks alone say (the period line) */
        /* Before the counter's first calibration (a job idle at the attach starts
         * after the callbacks of its period were off) its hits wait for one, at most
         * HOOK_WAIT_PERIODS periods, and the clocks' estimate of them with them, for
         * where it never comes. */
        bool wait = g_hook_ratio == HOOK_UNDECIDED && ga_cfg.launch_counter && g_period_had_window && !final && !moved &&
                    (hook_rest >= 1 || g_carry_hits >= 1) && ++g_carry_periods <= HOOK_WAIT_PERIODS;
        /* The slots grew in it (g_grew_ns): each side of the growth on its own. */
        bool grew = moved && g_grew_ns && g_period_had_window && !final && ga_cfg.launch_counter;
        /* Stretches waiting from grown periods before: counted at a calibration; they
         * wait on while periods grow in a row */
        double waited = 0;
        if (g_n_waits || g_waits_spilled > 0) {
            if (calibrated && g_hook_ratio > 0) waited = take_waits(g_hook_ratio);
            else if (!moved || final || ++g_wait_periods > HOOK_WAIT_PERIODS) waited = take_waits(0);
        }
        double carried = 0;
        if (grew) {
            double before = (double)(g_grew_hits - g_hook_p0) - (double)g_grew_on; /* outside the callbacks */
            if (before < 0) before = 0;
            if (before > hook_rest) before = hook_rest;
            /* the clocks' part before it: of the time the callbacks were off (new_period
             * has moved the start on) */
            uint64_t p0 = g_period_at_ns - len;
            double off_before = (double)(g_grew_ns > p0 ? g_grew_ns - p0 : 0) - (double)g_grew_cb_ns;
            double off = (double)len - (double)counted;
            double share = off > 0 && off_before > 0 ? off_before / off : 0;
            if (share > 1) share = 1;
            uint64_t now_each[GA_HOOK_TARGETS];
            hits_each(now_each);
            double end_s = (double)now / 1e9, clocks = rest_n + tail_n;
            wait_for_calibration(now_each, g_grew_each, g_grew_later, hook_rest - before, clocks * (1 - share), end_s);
            if (g_hook_ratio > 0) {
                rest_n = g_hook_ratio * before;
            } else if (g_hook_ratio == HOOK_UNDECIDED && before >= 1) {
                wait_for_calibration(g_grew_each, g_p0_each, g_grew_first | g_grew_later, before, clocks * share, end_s);
                rest_n = 0;
            } else {
                rest_n = clocks * share;
            }
            tail_n = 0;
            carried = g_hook_ratio > 0 ? g_hook_ratio * g_carry_hits : g_carry_clocks;
        } else if (hooked) {
            rest_n = g_hook_ratio * hook_rest, tail_n = 0;
            if (rest + tail > 0) rate = rest_n / (rest + tail);
            /* window-less and waiting periods before: as the busy clock's carry above */
            if (g_period_had_window || final) carried = g_hook_ratio * g_carry_hits;
        } else if (wait) {
            g_carry_hits += hook_rest, g_carry_clocks += rest_n + tail_n;
            rest_n = tail_n = 0;
        } else if (g_period_had_window || final) {
            carried = g_carry_clocks;
        }
        if (carried >= 0.5 && !ga_weights_add_to_pending((uint64_t)(carried + 0.5))) rest_n += carried;
        rest_n += waited;
        if (g_period_had_window) {
            all = seen + (uint64_t)(rest_n + tail_n + 0.5);
            g_extra_n += all - seen, g_extra_ns += rest + tail;
            if (ga_debug_on >= 2) /* bench/gpu/inprocess.py sets these beside the job's own steps */
                ga_debug("period (pid %d): ended at %.6f s (CLOCK_MONOTONIC) after %.3f ms; callbacks on %.3f ms, "
                         "%llu launches seen (%llu in the window of %.3f ms); teardown %.3f ms; tail %.3f ms at "
                         "%.0f/s; busy %.3f ms of %.3f ms%s; hook %.0f hits at %.4f%s%s%s; rest %.3f ms at %.0f/s "
                         "(count phase %.0f/s); %llu launches (clocks %llu)",
                         (int)getpid(), (double)now / 1e9, (double)len / 1e6, (double)counted / 1e6,
                         (unsigned long long)seen, (unsigned long long)in, (double)g_period_win_ns / 1e6,
                         (double)held / 1e6, tail / 1e6, tail > 0 && !hooked ? tail_n / tail * 1e9 : 0.0, busy_rest / 1e6,
                         busy_len / 1e6,
                         busy && !hooked ? "" : " (not used)", hook_rest, g_hook_ratio,
                         hooked ? "" : " (not used)", moved ? " (slots added)" : "", g_cutting ? " (cut)" : "", rest / 1e6, rate * 1e9,
                         g_rate >= 0 ? g_rate * 1e9 : -1.0, (unsigned long long)all,
                         (unsigned long long)(seen + (uint64_t)(clocks_n + 0.5)));
            if (ga_debug_on >= 2 && busy) /* where the busy clock's rate came from */
                ga_debug("period (pid %d): busy clock at %.1f launches per busy ms (%.1f before the callbacks' bias) "
                         "from %s; the count phase %llu launches in %.3f ms, %.3f ms busy; the last window %llu in "
                         "%.3f ms, %.3f ms busy",
                         (int)getpid(), lpb * 1e6, lpb_raw * 1e6, lpb_from, (unsigned long long)g_count_n,
                         (double)g_count_ns / 1e6, (double)g_count_busy / 1e6, (unsigned long long)g_last_win_n,
                         (double)g_last_win_ns / 1e6, (double)g_last_win_busy / 1e6);
        }
        /* a period whose window never opened: its launches join the pending period
         * before it (weights.cpp), counted where the counter is calibrated */
        else if (hooked || (final && busy)) all = seen + (uint64_t)(rest_n + 0.5);
        else if (final && g_rate >= 0) all = (uint64_t)(rate * (double)len + 0.5);
        if (wait) {
        } else if (!g_period_had_window && !final && !hooked) {
            if (g_busy_on) g_carry_busy += busy_rest;
            g_carry_hits = moved ? 0 : g_carry_hits + hook_rest;
        } else {
            g_carry_busy = g_carry_hits = g_carry_clocks = 0, g_carry_periods = 0;
        }
    }
    g_period_win_ns = 0;
    g_period_had_window = false, g_period_opened_ns = 0;
    return all;
}

/* ---- window open times, for the BPF join guard ----
 * A ring of the CUPTI timestamps at which recent windows opened. A kernel record
 * belongs to launches of the last window that opened before the kernel started,
 * so a sampled launch older than that window's opening cannot be its launch
 * (real CUPTI reuses correlation ids across windows). */
#define OPEN_RING 64
static std::atomic<uint64_t> g_open_ts[OPEN_RING];
static std::atomic<uint32_t> g_open_n;



void ga_window_count_started(uint64_t now_ns) noexcept {
    g_count_busy0 = ga_busy_now(), g_count_edge = g_edges;
    g_count_t0 = now_ns;
    g_count_seq0 = ga_launch_seq.load(std::memory_order_relaxed);
}

/* The count phases' launches per second, and the rate the launches between
 * windows were extrapolated at (corrected), for the exit line. */
void ga_window_count_rates(double *count, double *extra) noexcept {
    *count = g_counted_ns ? (double)g_counted_n * 1e9 / (double)g_counted_ns : 0;
    *extra = g_extra_ns > 0 ? g_extra_n * 1e9 / g_extra_ns : 0;
}

void ga_window_opened(uint64_t cupti_ts) noexcept {
    uint64_t now = ga_now_ns(), seq = ga_launch_seq.load(std::memory_order_relaxed);
    g_base_rate = -1, g_count_n = g_count_ns = 0;
    if (g_count_t0 && now - g_count_t0 >= 1000000) { /* at least 1 ms counted */
        g_count_n = seq - g_count_seq0, g_count_ns = now - g_count_t0;
        if (g_rate > 0) g_prev_rate = g_rate;
        g_rate = g_base_rate = (double)g_count_n / (double)g_count_ns;
        g_counted_n += g_count_n, g_counted_ns += g_count_ns;
        /* Per busy ns, where the same threads were summed all through and were busy
         * for half of it at least (a launch-bound thread): a count phase that caught
         * them idle says nothing of their busy time, and the last one's stands; a
         * thread that mostly waits (a loop paced by a timer, or by the GPU) keeps the
         * wall clock, where its CPU time per launch moves with what CUPTI does (on
         * the mock, a paced loop whose activity switches stalled read -44 %). */
        uint64_t busy = ga_busy_now() - g_count_busy0;
        g_count_busy = busy;
        if (g_count_edge == g_edges && g_busy_on && busy * 2 >= g_count_ns) {
            if (g_lpb > 0) g_prev_lpb = g_lpb;
            g_lpb = (double)g_count_n / (double)busy;
        }
    } else if (!ga_window_extrapolate && g_closed_ns && now - g_closed_ns >= 1000000) {
        /* the callbacks counted every launch since the last window */
        g_base_rate = (double)(seq - g_closed_seq) / (double)(now - g_closed_ns);
    }
    g_open_seq = seq, g_open_seq_ns = now;
    ga_tail_window_opened(cupti_ts); /* the records of this cycle count from here */
    g_open_sample_ns = ga_sample_ns.load(std::memory_order_relaxed);
    g_win_busy0 = ga_busy_now();
    g_count_t0 = 0;
    g_period_had_window = true;
    if (!g_period_opened_ns) g_period_opened_ns = now;
    uint32_t n = g_open_n.load(std::memory_order_relaxed);
    g_open_ts[n % OPEN_RING].store(cupti_ts, std::memory_order_relaxed);
    g_open_n.store(n + 1, std::memory_order_release);
    if (cupti_ts) ga_weights_period_opened(cupti_ts);
    g_win_open_ns.store(ga_now_ns(), std::memory_order_relaxed);
}

uint32_t ga_window_join_max_lag_us(uint64_t start_ns) noexcept {
    uint32_t n = g_open_n.load(std::memory_order_acquire);
    uint64_t best = 0;
    for (uint32_t i = 0; i < OPEN_RING && i < n; i++) {
        uint64_t t = g_open_ts[(n - 1 - i) % OPEN_RING].load(std::memory_order_relaxed);
        if (t && t <= start_ns) {
            best = t;
            break; /* newest first: the first one not after the start */
        }
    }
    if (!best) return 1; /* older than every remembered window: join nothing */
    uint64_t us = (start_ns - best) / 1000 + 1;
    return us > 0xffffffffull ? 0xffffffffu : (uint32_t)us;
}

/* Attach time and time inside windows, for the exit line's window share. */
uint32_t ga_window_slots(void) noexcept { return g_slots > 1 ? g_slots : ga_cfg.duty_cycle; }
uint64_t ga_window_period_ns(void) noexcept { return period_ns(); }

uint64_t ga_window_attached_at(void) noexcept {
    return g_attach_ns.load(std::memory_order_relaxed);
}

/* Its launches from now on are an edge's (noted outside, their records dropped), and
 * only then is its count taken, so that no launch the window noted falls after its
 * count: the other way round, the launches of a poller preempted between the two
 * (251 of 97 000 once, three suites at once beside a CPU burner on the 2-core VM) were
 * noted as the window's but not counted in it, and their records took the count
 * places of its last ones (tail.cpp), lost. The caller sets the state after. */
void ga_window_closed(void) noexcept {
    ga_window_on.store(GA_WIN_EDGE, std::memory_order_release);
    uint64_t open = g_win_open_ns.exchange(0, std::memory_order_relaxed);
    if (open) {
        g_free_cuts = 0;
        uint64_t now = ga_now_ns(), seq = ga_launch_seq.load(std::memory_order_relaxed);
        uint64_t dt = now - open;
        g_win_closed_ns.fetch_add(dt, std::memory_order_relaxed);
        g_period_win_ns += dt;
        if (ga_trace_until_ns() <= now) /* a capture's window is not the budget's */
            ga_budget_note_window(dt, seq - g_open_seq, g_base_rate, g_count_n, g_count_ns);
        g_closed_seq = seq, g_closed_ns = now;
        if (ga_debug_on >= 2) /* tests/test_windows.py sets the loop's own launches in it against its records */
            ga_debug("window (pid %d): open from %.6f to %.6f s (CLOCK_MONOTONIC), %llu launches", (int)getpid(),
                     (double)g_open_seq_ns / 1e9, (double)now / 1e9, (unsigned long long)(seq - g_open_seq));
        /* less the time its stack samples took, which a count phase does not pay */
        uint64_t sampled = ga_sample_ns.load(std::memory_order_relaxed) - g_open_sample_ns;
        g_last_win_ns = dt > sampled ? dt - sampled : 0, g_last_win_n = seq - g_open_seq;
        uint64_t busy = ga_busy_now() - g_win_busy0;
        g_last_win_busy = busy > sampled ? busy - sampled : 0;
        if (g_busy_on && g_last_win_n && g_last_win_busy * 2 >= g_last_win_ns)
            g_win_lpb = (double)g_last_win_n / (double)g_last_win_busy;
    }
}

/* The last window's length less its stack samples' time, and its launches (its
 * tail's measure, tail.cpp). */
void ga_window_last(uint64_t *ns, uint64_t *launches) noexcept { *ns = g_last_win_ns, *launches = g_last_win_n; }
uint64_t ga_window_last_busy(void) noexcept { return g_busy_on ? g_last_win_busy : 0; }

uint64_t ga_window_time_ns(void) noexcept {
    uint64_t open = g_win_open_ns.load(std::memory_order_relaxed), now = ga_now_ns();
    return g_win_closed_ns.load(std::memory_order_relaxed) + (open && now > open ? now - open : 0);
}

/* The poller after a flush (period_end: a period ended) or at a detach or exit:
 * the weights due are published (weights.cpp), and the held records whose weight
 * is known go (held.cpp); at a detach or exit all of them, at the last weight. */
void ga_window_release_records(bool period_end) noexcept {
    if (ga_cfg.duty_cycle <= 1) return;
    ga_activity_fire_held(!period_end, ga_weights_release(period_end));
    /* After the records: the agent may close its intervals before this time. */
    ga_published(period_end ? ga_weights_published_until() : ga_now_ns(), !period_end);
}
