/* budget.cpp: the windows' schedule under a cost budget (GPU_AGENT_OVERHEAD_BUDGET,
 * percent of the process's time, default 2).
 *
 * With CUPTI torn down between windows (teardown.cpp) a window costs its process
 * milliseconds of fixed stalls, on top of the slowdown while it is open. So the
 * shim measures, in its own process, what each window costs:
 *   fixed     the teardown (gate wait, unsubscribe and cuptiFinalize, on the
 *             application thread that runs it), the re-subscription and kernel
 *             activity's enable and disable (on the poller; counted whole, since
 *             the driver holds the process's launches meanwhile);
 *   on        window time x its slowdown, 1 - (launch rate in the window / the
 *             undisturbed rate: the count phase's, or with the callbacks on
 *             throughout, the rate since the last window), with the count
 *             phase's own slowdown on top;
 *   count     the count phase's callbacks: its time x their slowdown (their
 *             cost per launch as the windows' tails measure it, tail.cpp;
 *             CB_NS a launch, until one has);
 *   tail      half a window at about the window's slowdown.
 * and plans each period from the running means (EWMA):
 *   window W = 10 x fixed, within [100 ms, 1 s]: fixed costs near a tenth of it;
 *   period P = (fixed + on + count) / budget, within [10 W, 15 s].
 * The 15 s ceiling is the coverage floor: every process that runs 30 s or more is
 * in a window at least once in every 30 s (two periods' random windows are at
 * most 2P - W apart). Where the floor holds P below what the budget asks, the
 * process pays more than the budget: counted (budget_over) and said at exit.
 * The first period after an attach is four 100 ms slots, its window in one of the
 * last three (window.cpp), so that a process shows within half a second and its
 * window, after a count phase, measures the costs. Until one has, a period is
 * UNMEASURED_SLOTS slots of 100 ms: a steady period's length, not more. (The
 * second period, planned at the attach, was 4 s: its one count phase stood for
 * 4 s of launches, and on an H100 that period alone read a 60 s eager run
 * -0.5 % and +0.6 %, bench/gpu/periods.py.)
 *
 * GPU_AGENT_DUTY_CYCLE and GPU_AGENT_WINDOW_MS are expert overrides: with either
 * set, every period is DUTY_CYCLE slots of WINDOW_MS (the defaults for the other).
 * Poller thread only, but for ga_budget_note_stall (any thread). */
#include <stdio.h>
#include <unistd.h>

#include "ga_internal.h"

#define MS 1000000ull
#define W_MIN (100 * MS)
#define W_MAX (1000 * MS)
#define P_MAX GA_PERIOD_MAX_NS
#define N_MIN 10u
#define FIRST_SLOTS 4u
#define UNMEASURED_SLOTS 15u
/* The count phase's callbacks, per launch: on an H100, launches with the launch
 * callbacks alone on cost about 300 ns more than with none (4 359 against 4 052 ns,
 * `python -m bench.gpu overhead --method timeline`, before the teardown). Used
 * until a window has measured its slowdown. */
#define CB_NS 300.0
/* The count phase's slowdown, its callbacks' measured cost per launch times its
 * launch rate, is at most BIAS_MAX. Until CB_MIN tails have measured that cost,
 * their median is taken up to CB_NS a launch, and before any tail none: the count
 * phase then reads low by the callbacks' cost (1-4 % of an eager loop's launches
 * on an H100). A share of the window's slowdown stood in before (K_CB = 0.12 x s /
 * (1 - s)): the first windows pay for the first launches' forced samples and the
 * first instrumentation, so s was large and the share read the first periods far
 * too high: a 2 s mock loop's first periods +36 % (its run +33 %), short eager
 * processes on an H200 +20 % (docs/benchmarks.md). */
#define BIAS_MAX 0.5
#define ALPHA 0.3 /* weight of the newest window in the running means */

static std::atomic<uint64_t> g_switch_ns, g_td_ns, g_td_n, g_stat_over;
static uint32_t g_windows_seen; /* windows whose costs were noted */
/* running means (< 0: none yet): a window's switches, a teardown, the slowdown in
 * windows, the count phase's share of its time */
static double g_switch_mean = -1, g_td_mean = -1, g_slow = -1, g_cb_frac = 0;
/* the launch callbacks' cost per launch, ns, as g_cb_n tails measured it */
#define CB_RING 15
#define CB_MIN 3 /* tails before their median stands whole: one tail of a job whose rate wanders can read anything */
static double g_cb_ns, g_cb_ring[CB_RING];
static uint32_t g_cb_n;
static double g_fixed_ns = -1;
static double g_switch_first = -1; /* the first window's switches: the first instrumentation */
static uint64_t g_plan_w, g_plan_p; /* the last plan, for the exit line */
static double g_plan_cost;          /* its estimated cost, a fraction of the process's time */

static double ewma(double old, double x) { return old < 0 ? x : old + ALPHA * (x - old); }

bool ga_budget_on(void) noexcept { return !ga_cfg.fixed_schedule && ga_cfg.duty_cycle > 1; }

static bool g_tails; /* windows are torn down, each followed by its tail (collection.cpp says) */

void ga_budget_set_tails(bool on) noexcept { g_tails = on; }

void ga_budget_note_stall(uint64_t ns, bool teardown) noexcept {
    if (!teardown) {
        g_switch_ns.fetch_add(ns, std::memory_order_relaxed);
        return;
    }
    g_td_ns.fetch_add(ns, std::memory_order_relaxed);
    g_td_n.fetch_add(1, std::memory_order_release);
}

/* A teardown's stall comes after its window's end: its mean is kept apart. */
static void update_fixed(void) {
    uint64_t n = g_td_n.exchange(0, std::memory_order_acquire);
    if (n) g_td_mean = ewma(g_td_mean, (double)g_td_ns.exchange(0, std::memory_order_relaxed) / (double)n);
    if (g_switch_mean >= 0) g_fixed_ns = g_switch_mean + (g_td_mean > 0 ? g_td_mean : 0);
}

void ga_budget_note_window(uint64_t win_ns, uint64_t win_launches, double base_rate, uint64_t count_launches,
                           uint64_t count_ns) noexcept {
    if (!win_ns) return;
    g_windows_seen++;
    /* the switches since the last window: the re-subscription, this one's enable and disable */
    double sw = (double)g_switch_ns.exchange(0, std::memory_order_relaxed);
    if (g_switch_first < 0) g_switch_first = sw;
    g_switch_mean = ewma(g_switch_mean, sw);
    if (base_rate > 0 && win_launches >= 50) {
        double s = 1.0 - ((double)win_launches / (double)win_ns) / base_rate;
        g_slow = ewma(g_slow, s < 0 ? 0 : s > 0.9 ? 0.9 : s);
    }
    double rate = count_ns ? (double)count_launches / (double)count_ns : 0;
    if (g_cb_n) g_cb_frac = ga_budget_count_bias(rate);
    else if (count_ns) g_cb_frac = ewma(g_cb_frac, CB_NS * rate); /* the plan's guess until a tail */
}

/* A tail's measure of the callbacks' cost per launch (ns; noisy, may be < 0):
 * the median of the last CB_RING, robust to a window that paid for more than its
 * activity (the first ones' forced samples, a descheduled thread). */
void ga_budget_note_tail(double cb_ns) noexcept {
    g_cb_ring[g_cb_n++ % CB_RING] = cb_ns;
    uint32_t n = g_cb_n < CB_RING ? g_cb_n : CB_RING;
    double v[CB_RING];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        for (; j > 0 && v[j - 1] > g_cb_ring[i]; j--) v[j] = v[j - 1];
        v[j] = g_cb_ring[i];
    }
    g_cb_ns = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The count phase's slowdown against the process undisturbed, a fraction of its
 * time, at its launch rate (per ns): c x rate with c as the tails measured it
 * (up to CB_NS until CB_MIN tails have; 0 before any: BIAS_MAX above). */
double ga_budget_count_bias(double count_rate) noexcept {
    double b = ga_budget_callback_ns(count_rate) * count_rate;
    return b > BIAS_MAX ? BIAS_MAX : b;
}

/* What the callbacks cost a launch (ns), as the tails measured it. */
double ga_budget_callback_ns(double count_rate) noexcept {
    if (!g_cb_n || g_cb_ns <= 0) return 0;
    return g_cb_n >= CB_MIN || g_cb_ns < CB_NS ? g_cb_ns : CB_NS;
}

/* The next period: *slots slots of *slot_ns each. */
void ga_budget_plan(bool first, uint32_t *slots, uint64_t *slot_ns) noexcept {
    if (!ga_budget_on()) {
        *slots = ga_cfg.duty_cycle;
        *slot_ns = (uint64_t)ga_cfg.window_ms * MS;
        return;
    }
    update_fixed();
    if (first || g_fixed_ns < 0) { /* the attach's, or no window measured yet */
        *slots = first ? FIRST_SLOTS : UNMEASURED_SLOTS;
        *slot_ns = W_MIN;
        return;
    }
    /* the window's slowdown against the count phase, and the count phase's own */
    double fixed = g_fixed_ns, slow = g_slow < 0 ? 0 : g_slow;
    slow += g_cb_frac * (1 - slow);
    uint64_t w = (uint64_t)(10 * fixed);
    w = w < W_MIN ? W_MIN : w > W_MAX ? W_MAX : w;
    w = (w + MS / 2) / MS * MS; /* whole ms */
    /* a window costs fixed + W x slow, its tail (tail.cpp) about W/2 x slow, and
     * its count phase (one slot) W x cb_frac */
    double on = g_tails ? 1.5 : 1.0;
    double cost = fixed + (double)w * (on * slow + g_cb_frac);
    double p = cost / ((double)ga_cfg.budget_bp / 10000.0);
    uint32_t n = (uint32_t)(p / (double)w + 0.999);
    uint32_t n_max = (uint32_t)(P_MAX / w);
    if (n < N_MIN) n = N_MIN;
    if (n > n_max) {
        n = n_max;
        g_stat_over.fetch_add(1, std::memory_order_relaxed);
    }
    *slots = n;
    *slot_ns = w;
    g_plan_w = w, g_plan_p = w * n, g_plan_cost = cost / (double)(w * n);
}

uint64_t ga_budget_stat_over(void) noexcept { return g_stat_over.load(std::memory_order_relaxed); }

void ga_budget_log_exit(void) noexcept {
    if (!ga_budget_on() || !g_windows_seen || g_fixed_ns < 0) return;
    double p = (double)g_plan_p, w = (double)g_plan_w;
    ga_debug("budget (pid %d): %.2f %% asked; last plan one %.0f ms window every %.2f s, estimated cost "
             "%.2f %% (fixed %.2f ms a window: switches %.2f ms, the first window's %.2f ms, teardown %.2f ms; "
             "slowdown in windows %.1f %%, count phase %.2f %%); "
             "%llu periods over the budget to keep one window in every 30 s",
             (int)getpid(), ga_cfg.budget_bp / 100.0, w / 1e6, p / 1e9, 100.0 * g_plan_cost,
             g_fixed_ns / 1e6, g_switch_mean / 1e6, g_switch_first / 1e6, g_td_mean < 0 ? 0.0 : g_td_mean / 1e6, 100.0 * (g_slow < 0 ? 0 : g_slow), 100.0 * g_cb_frac,
             (unsigned long long)g_stat_over.load());
}
