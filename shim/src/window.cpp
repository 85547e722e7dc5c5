/* window.cpp: duty-cycled collection ("collection windows"); audit mode's tallies
 * live in audit.cpp.
 *
 * Why: CUPTI's CONCURRENT_KERNEL activity costs GPU time on every kernel
 * (~0.4 us each on an H200: +14 % on a replay of tiny-kernel graphs) and CPU time
 * on every launch. So while an agent is attached the shim traces kernels only
 * inside windows: time is cut into periods of GPU_AGENT_DUTY_CYCLE (N) slots of
 * GPU_AGENT_WINDOW_MS each, and in every period ONE slot, drawn uniformly at
 * random, is "on" (kernel activity enabled, launches sampled for stacks); the
 * other N-1 are off. Every instant is therefore inside a window with probability
 * exactly 1/N, whatever the workload's own period. The launch callbacks stay on
 * for the whole attachment, only to count launches: a window slows the launches
 * made in it, so each windowed record weighs all launches / windowed launches
 * (about N; see "record weights" below), not N alone. N = 1 is continuous, exact
 * collection.
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

std::atomic<int> ga_window_on;

static uint64_t g_period_start_ns; /* start of the current period */
static unsigned g_on_slot;         /* the slot of the current period that is on */
static unsigned g_next_on_slot;    /* the next period's (its count phase may start in this one) */
static uint64_t g_rng;
/* Attach time and window time so far (the exit line's window share); ga_now_ns. */
static std::atomic<uint64_t> g_attach_ns, g_win_closed_ns, g_win_open_ns;

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t slot_ns(void) { return (uint64_t)ga_cfg.window_ms * 1000000ull; }

static void period_edge(bool first);
bool ga_window_period_ended; /* set at a period's end; the poller releases its records */

static uint64_t g_period_len_ns; /* of the period that ends (end_period) */
/* With teardowns, each period ends a random part of a slot after its N slots, so
 * that the grid of windows and count phases holds no fixed phase of a periodic
 * workload (count phases that always met a 5 ms burst loop at the same phase read
 * it 10 % high). */
static uint64_t g_jitter_ns;
static uint64_t period_ns(void) { return slot_ns() * ga_cfg.duty_cycle + g_jitter_ns; }

static void draw_next(void) { g_next_on_slot = (unsigned)(splitmix(&g_rng) % ga_cfg.duty_cycle); }
static uint64_t g_count_t0, g_count_seq0; /* the count phase's start (0: none) */
static double g_rate = -1;                 /* launches per ns of the last count phase; < 0: none */
static uint64_t g_period_win_ns;           /* window time in the current period */
static bool g_period_had_window;

static void new_period(uint64_t start, bool first) {
    g_period_len_ns = first ? 0 : start - g_period_start_ns;
    g_period_start_ns = start;
    if (first) draw_next();
    g_on_slot = g_next_on_slot;
    draw_next();
    g_jitter_ns = ga_window_extrapolate && slot_ns() ? splitmix(&g_rng) % slot_ns() : 0;
    period_edge(first);
}

void ga_window_begin(uint64_t now_ns) noexcept {
    g_rate = -1, g_count_t0 = 0, g_period_win_ns = 0, g_period_had_window = false;
    g_attach_ns.store(now_ns, std::memory_order_relaxed);
    g_win_closed_ns.store(0, std::memory_order_relaxed);
    g_win_open_ns.store(0, std::memory_order_relaxed);
    if (!g_rng) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g_rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
    }
    new_period(now_ns, true);
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
        if (now_ns >= next + s * ga_cfg.duty_cycle) next = now_ns - (now_ns - next) % (s * ga_cfg.duty_cycle);
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

int ga_window_phase(uint64_t now_ns, uint64_t *next_edge_ns) noexcept {
    if (ga_window_should_be_on(now_ns, next_edge_ns)) return GA_PHASE_ON;
    if (!ga_window_extrapolate || *next_edge_ns == UINT64_MAX) return GA_PHASE_OFF;
    uint64_t s = slot_ns(), period_end = g_period_start_ns + period_ns();
    /* the next window opens at this period's on slot, or at the next period's */
    uint64_t on_lo = *next_edge_ns < period_end ? *next_edge_ns : period_end + g_next_on_slot * s;
    uint64_t count_lo = on_lo > s ? on_lo - s : 0;
    if (now_ns >= count_lo) {
        if (on_lo < *next_edge_ns) *next_edge_ns = on_lo;
        return GA_PHASE_COUNT;
    }
    if (count_lo < *next_edge_ns) *next_edge_ns = count_lo;
    return GA_PHASE_OFF;
}



/* ---- window open times, for the BPF join guard ----
 * A ring of the CUPTI timestamps at which recent windows opened. A kernel record
 * belongs to launches of the last window that opened before the kernel started,
 * so a sampled launch older than that window's opening cannot be its launch
 * (real CUPTI reuses correlation ids across windows). */
#define OPEN_RING 64
static std::atomic<uint64_t> g_open_ts[OPEN_RING];
static std::atomic<uint32_t> g_open_n;

static void note_period_open(uint64_t cupti_ts);


void ga_window_count_started(uint64_t now_ns) noexcept {
    g_count_t0 = now_ns;
    g_count_seq0 = ga_launch_seq.load(std::memory_order_relaxed);
}

void ga_window_opened(uint64_t cupti_ts) noexcept {
    uint64_t now = ga_now_ns();
    if (g_count_t0 && now - g_count_t0 >= 1000000) /* at least 1 ms counted */
        g_rate = (double)(ga_launch_seq.load(std::memory_order_relaxed) - g_count_seq0) /
                 (double)(now - g_count_t0);
    g_count_t0 = 0;
    g_period_had_window = true;
    uint32_t n = g_open_n.load(std::memory_order_relaxed);
    g_open_ts[n % OPEN_RING].store(cupti_ts, std::memory_order_relaxed);
    g_open_n.store(n + 1, std::memory_order_release);
    if (cupti_ts) note_period_open(cupti_ts);
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

/* ---- record weights: each period's launches / its window's launches ----
 * A windowed record stands for N records (one slot in N is a window) only if
 * windows cost nothing. They do not: CUPTI activity costs CPU per launch, so a
 * launch-bound loop launches more slowly inside windows, and weighting by N ran
 * 7-17 % low on an H200 (docs/benchmarks-history.md section 7). So the launch callbacks
 * stay on between windows and count every launch (ga_launch_seq), the windows'
 * own launches are counted too (ga_stat_launches), and the records of the
 * window of period p weigh
 *     launches in period p / launches in its window
 * Each period is a stratum holding exactly one window, at a uniformly random
 * slot, so the estimate sums, period by period, records x launches / windowed
 * launches: exact for any mix of launches whose records per launch (1 for a
 * kernel, K for a K-node graph) are the same in and out of the period's window,
 * whatever the job does from one period to the next. This needs the period's
 * count, known only when it ends, so the shim holds a window's converted records
 * (activity.cpp) and fires them when their weight is published, one period after
 * theirs (end_period; ga_window_release_records).
 * Two earlier weights, each from the counts SO FAR applied to the records that
 * completed next, ran off on an H200: the rate form N x (launches per attached
 * second) / (windowed launches per window second) carried the run's window share
 * (-3.7 % and +4.3 % on graph replays of 40-81 windows), and the ratio of counts
 * over past periods read -5.2 % and +70 % on torch graph replays (a start-up
 * period whose window caught few of its launches fits that). A period whose
 * window saw no launch gives its launches to the period before it (or, before
 * any window launch, to the next one that has some): they would be lost
 * otherwise (end_period). The weight is fixed point, x WQ, rounded per record
 * without bias (ga_window_round_weight). */
#define WQ 1024u
std::atomic<uint64_t> ga_launch_seq;
/* Poller thread only (and at detach/exit): the counts at the current period's
 * start, the launches carried from periods whose window saw none, the last
 * published weight (for a period with no windowed launch, and for what is still
 * held at a detach or exit). */
static uint64_t g_snap_all, g_snap_in, g_carry_all;
static uint32_t g_last_q;
/* The last ended period with windowed launches, not yet published: a period's
 * weight is published one period late, so that the launches of a following
 * period whose window saw none can still join it. Above all at an exit or a
 * detach: the partial last period's window has often not opened yet, and its
 * launches (up to one period, 200 ms at the defaults) had no record to stand
 * for them; on an H200 that lost 3.1 % of a 4 s eager run's launches
 * (docs/benchmarks-history.md section 11). Seq 0: none. */
static uint32_t g_pend_seq;
static uint64_t g_pend_all, g_pend_in;
std::atomic<uint64_t> ga_stat_joined; /* launches given to the pending period (counter 28) */

static uint32_t to_q(double w) {
    if (!(w >= 1.0)) w = 1.0; /* a record stands for itself at least */
    /* BPF refuses heavier records (the contract's bound): one launch in a window
     * standing for over a million is rare enough to count low rather than lose. */
    if (w > GA_MAX_RECORD_WEIGHT) w = GA_MAX_RECORD_WEIGHT;
    double wq = w * WQ;
    return wq >= 4294967295.0 ? 0xffffffffu : (uint32_t)wq;
}

/* The launches of the period that ends now (`final`: a detach or exit, at a
 * partial period): all, and those in its window. */
static void period_counts(uint64_t *all, uint64_t *in, bool final) {
    uint64_t all_now = ga_launch_seq.load(std::memory_order_relaxed);
    uint64_t in_now = ga_stat_launches.load(std::memory_order_relaxed);
    *all = all_now - g_snap_all, *in = in_now - g_snap_in;
    g_snap_all = all_now, g_snap_in = in_now;
    if (ga_window_extrapolate) {
        /* The callbacks saw the count phase, the window and the launches before
         * the teardown: the rest of the period goes at the count phase's rate (the
         * window's own, slower rate before any count phase). A period whose
         * window never opened has only what the callbacks saw: none when its
         * process made no launch since the last teardown, none either when another
         * CUPTI client held the subscription (GA_SC_WINDOWS_SKIPPED counts those).
         * But a partial period at a detach or exit, whose window was still to
         * come, goes at the last rate. */
        uint64_t len = final ? ga_now_ns() - g_period_start_ns : g_period_len_ns;
        double rest = len > g_period_win_ns ? (double)(len - g_period_win_ns) : 0;
        double rate = g_rate >= 0 ? g_rate : g_period_win_ns ? (double)*in / (double)g_period_win_ns : 0;
        if (g_period_had_window) *all = *in + (uint64_t)(rate * rest + 0.5);
        else if (final && g_rate >= 0) *all = (uint64_t)(g_rate * (double)len + 0.5);
    }
    g_period_win_ns = 0;
    g_period_had_window = false;
}

/* Period numbers. A launch in a window notes its period by correlation id, so
 * that its record gets that period's weight whenever it completes: a GPU-bound
 * loop runs tens of ms behind its launches, so records of a late window arrive
 * after their period ended (released then with the next period's weight, one
 * H200 torch graph replay read +729 %: that next window caught a sync gap, so
 * its own launches were few and the weight huge). */
#define CORR_TAB (1u << 16)
#define QRING 256u
static std::atomic<uint32_t> g_period_seq;            /* the current period; 0: none */
static std::atomic<uint64_t> g_corr_period[CORR_TAB];  /* corr << 32 | period */
static std::atomic<uint64_t> g_period_q[QRING];        /* period << 32 | weight x WQ */

/* The CUPTI time each recent period's window opened, for the sanity check of
 * its records: a kernel launched in a window cannot start before it opened. */
static std::atomic<uint64_t> g_period_open_ts[QRING];
static std::atomic<uint32_t> g_period_open_seq[QRING];

static void note_period_open(uint64_t cupti_ts) {
    uint32_t seq = g_period_seq.load(std::memory_order_relaxed);
    g_period_open_seq[seq % QRING].store(0, std::memory_order_relaxed);
    g_period_open_ts[seq % QRING].store(cupti_ts, std::memory_order_relaxed);
    g_period_open_seq[seq % QRING].store(seq, std::memory_order_release);
}

bool ga_window_record_impossible(uint32_t period, uint64_t start_ns, uint64_t end_ns) noexcept {
    if (end_ns < start_ns) return true;
    if (g_period_open_seq[period % QRING].load(std::memory_order_acquire) != period) return false;
    uint64_t open = g_period_open_ts[period % QRING].load(std::memory_order_relaxed);
    /* 50 us: CUPTI maps GPU times to its CPU clock, which may be off by a little. */
    return open && start_ns + 50000 < open;
}

/* period << 32 | the correlation id of (about: threads race) its window's last launch */
static std::atomic<uint64_t> g_period_last_launch[QRING];

void ga_window_note_launch(uint32_t correlation_id) noexcept {
    uint32_t seq = g_period_seq.load(std::memory_order_relaxed);
    g_corr_period[correlation_id & (CORR_TAB - 1)].store((uint64_t)correlation_id << 32 | seq,
                                                         std::memory_order_relaxed);
    g_period_last_launch[seq % QRING].store((uint64_t)seq << 32 | correlation_id,
                                            std::memory_order_relaxed);
}

uint32_t ga_window_period_of(uint32_t correlation_id, bool *unseen) noexcept {
    uint64_t v = g_corr_period[correlation_id & (CORR_TAB - 1)].load(std::memory_order_relaxed);
    if ((uint32_t)(v >> 32) == correlation_id && (uint32_t)v) return (uint32_t)v;
    /* Not noted: no launch callback saw this launch (a launch path CUPTI reports
     * no callback for), or its entry was overwritten. The current period's, the
     * likeliest. The caller counts it: the weights assume the launches the
     * callbacks miss are the same share in and out of the windows. */
    *unseen = true;
    return g_period_seq.load(std::memory_order_relaxed);
}

static uint32_t published_q(uint32_t period) {
    uint64_t v = g_period_q[period % QRING].load(std::memory_order_acquire);
    return period && (uint32_t)(v >> 32) == period ? (uint32_t)v : 0;
}

uint32_t ga_window_weight_of(uint32_t period) noexcept {
    uint32_t cur = g_period_seq.load(std::memory_order_relaxed);
    /* A period long gone (a stale correlation-id entry) would wait forever: it
     * takes the last published weight (cur - 1's is usually still pending; N if
     * none). */
    if (cur - period >= QRING / 2) {
        uint32_t q = published_q(cur - 1);
        if (!q) q = published_q(cur - 2);
        return q ? q : ga_cfg.duty_cycle * WQ;
    }
    return published_q(period);
}

static void publish(uint32_t seq, uint32_t q) {
    g_period_q[seq % QRING].store((uint64_t)seq << 32 | q, std::memory_order_release);
}

/* ---- graph replays CUPTI mis-times ----
 * On an H200 (CUDA 13, driver 580) the records of the LAST traced replay of a
 * graph exec come back with wrong end times whenever the same exec is replayed
 * again while activity is off: every later, untraced replay writes its own
 * nodes' end times into them, until CUPTI reads them out. After a window, 100
 * untraced replays gave its last replay's 2-7 us kernels 5.5 ms each; every
 * other record, and every eager kernel, was right (docs/cupti-graph-windows.md).
 * So the last traced replay of every graph node in each window is left out: its
 * launch is not counted among the window's launches, and its records are
 * dropped, so the window's other records weigh the period's launches as before
 * (unbiased: which replay is a window's last is decided by the window's edge,
 * not by the kernels). Which replay was the last TRACED one is read off the
 * records themselves (activity.cpp), not off the launch callbacks, which cannot
 * see where in a launch CUPTI's switch took effect. So a period's weight is
 * computed after the flush that follows its publication is due (the records
 * are in by then): publish_pending queues it, ga_window_release_records does it. */
struct due_period { uint32_t seq; uint64_t all, in; };
#define DUE_MAX 8u
static due_period g_due[DUE_MAX];
static unsigned g_due_n;
static std::atomic<uint64_t> g_period_last_corr[QRING]; /* period << 32 | newest corr left out */
std::atomic<uint64_t> ga_stat_left_out_launches, ga_stat_left_out_records, ga_stat_left_out_late;

#define LEFT_OUT_TAB 8192u
static std::atomic<uint32_t> g_left_out[LEFT_OUT_TAB]; /* correlation ids, direct-mapped */

void ga_window_leave_out(uint32_t correlation_id) noexcept {
    g_left_out[correlation_id & (LEFT_OUT_TAB - 1)].store(correlation_id, std::memory_order_relaxed);
}

bool ga_window_left_out(uint32_t correlation_id) noexcept {
    return correlation_id &&
           g_left_out[correlation_id & (LEFT_OUT_TAB - 1)].load(std::memory_order_relaxed) == correlation_id;
}

static void publish_now(uint32_t seq, uint64_t all, uint64_t in) {
    uint32_t newest = 0;
    uint64_t left = ga_activity_leave_out_last_replays(seq, &newest);
    g_period_last_corr[seq % QRING].store((uint64_t)seq << 32 | newest, std::memory_order_relaxed);
    ga_stat_left_out_launches.fetch_add(left, std::memory_order_relaxed);
    if (in > left) {
        g_last_q = to_q((double)all / (double)(in - left));
    } else {
        /* Every windowed launch was left out: no record stands for the period's
         * launches, which go to the next period with windowed launches. */
        g_carry_all += all;
        if (!g_last_q) g_last_q = ga_cfg.duty_cycle * WQ;
    }
    publish(seq, g_last_q);
}

/* A GPU-bound job runs its window's kernels long after their launches, and the
 * last traced replays can only be told once their records are in: a period
 * whose held records do not reach its window's last launch yet waits, up to
 * DUE_WAIT periods (a launch traced by no record, at the window's closing edge,
 * would otherwise hold it forever). `all`: publish everything now. */
#define DUE_WAIT 4u
static void publish_due(bool all = true) {
    unsigned keep = 0;
    uint32_t cur = g_period_seq.load(std::memory_order_relaxed);
    for (unsigned i = 0; i < g_due_n; i++) {
        const due_period d = g_due[i];
        uint64_t last = g_period_last_launch[d.seq % QRING].load(std::memory_order_relaxed);
        bool waiting = !all && cur - d.seq <= DUE_WAIT && (uint32_t)(last >> 32) == d.seq &&
                       ga_activity_newest_held(d.seq) < (uint32_t)last;
        if (waiting) g_due[keep++] = d;
        else publish_now(d.seq, d.all, d.in);
    }
    g_due_n = keep;
}

static void publish_pending(void) {
    if (!g_pend_seq) return;
    if (g_due_n == DUE_MAX) publish_due(); /* too many waiting: no more waiting */
    g_due[g_due_n++] = {g_pend_seq, g_pend_all, g_pend_in};
    g_pend_seq = 0;
}

bool ga_window_late_last_replay(uint32_t period, uint32_t correlation_id) noexcept {
    uint64_t v = g_period_last_corr[period % QRING].load(std::memory_order_relaxed);
    return (uint32_t)(v >> 32) == period && correlation_id >= (uint32_t)v && (uint32_t)v;
}

/* The current period ends (first: nothing ended, at attach), and a new one
 * starts (numbers skip 0, "no period"). Its records weigh
 *   its launches / its window's launches,
 * published when the next period ends (g_pend_seq). A period whose window saw no
 * launch has no records to weigh: its launches join the pending period if there
 * is one (consecutive ones too, until an idle period or 64 periods), else the
 * next period with windowed launches (g_carry_all). `final` (detach, exit):
 * everything pending is published now. */
static void end_period(bool first = false, bool final = false) {
    uint32_t seq = g_period_seq.load(std::memory_order_relaxed);
    if (!first && seq) {
        uint64_t all, in;
        period_counts(&all, &in, final);
        if (GA_EXP(cb_windowed)) { /* no counts outside windows */
            g_last_q = ga_cfg.duty_cycle * WQ;
            publish(seq, g_last_q);
        } else if (!in) {
            if (g_pend_seq) {
                g_pend_all += all;
                ga_stat_joined.fetch_add(all, std::memory_order_relaxed);
            } else {
                g_carry_all += all;
            }
            /* Held records should not wait long: a period with no launch at all
             * (idle) ends the wait, and so does a pending period grown old. */
            if (!all || seq - g_pend_seq >= QRING / 4) publish_pending();
            /* for stragglers only (records of launches no callback saw) */
            publish(seq, g_last_q ? g_last_q : ga_cfg.duty_cycle * WQ);
        } else {
            publish_pending();
            g_pend_seq = seq, g_pend_all = all + g_carry_all, g_pend_in = in;
            g_carry_all = 0;
        }
    }
    if (final) publish_pending();
    g_period_seq.store(seq + 1 ? seq + 1 : 1, std::memory_order_relaxed);
}

static void period_edge(bool first) {
    if (first) {
        uint64_t all, in;
        period_counts(&all, &in, false); /* the snapshots start here */
        g_due_n = 0;
        g_carry_all = 0;
        g_last_q = 0;
        g_pend_seq = 0;
        ga_window_period_ended = false;
        end_period(true);
        return;
    }
    /* Counted at the edge itself; held records are released a moment later. */
    end_period();
    ga_window_period_ended = true;
}

std::atomic<uint64_t> ga_stat_unweighted;

void ga_window_release_records(bool period_end) noexcept {
    if (ga_cfg.duty_cycle <= 1) return;
    /* A detach or exit: the partial period ends here, and its launches join the
     * pending period's if its window saw none. */
    if (!period_end) end_period(false, true);
    publish_due(!period_end); /* after the flush; at a detach or exit, all of them */
    if (!period_end && g_carry_all) {
        /* Only launches with no window launch before them at all (or whose
         * window's launches were all left out) have no record to stand for them:
         * counted. */
        ga_stat_unweighted.fetch_add(g_carry_all, std::memory_order_relaxed);
        g_carry_all = 0;
    }
    ga_window_period_ended = false;
    /* At a detach or exit everything held goes, at the last weight if need be. */
    ga_activity_fire_held(!period_end, g_last_q);
}

/* Attach time and time inside windows, for the exit line's window share. */
uint64_t ga_window_attached_at(void) noexcept {
    return g_attach_ns.load(std::memory_order_relaxed);
}

void ga_window_closed(void) noexcept {
    uint64_t open = g_win_open_ns.exchange(0, std::memory_order_relaxed);
    if (open) {
        uint64_t dt = ga_now_ns() - open;
        g_win_closed_ns.fetch_add(dt, std::memory_order_relaxed);
        g_period_win_ns += dt;
    }
}

uint64_t ga_window_time_ns(void) noexcept {
    uint64_t open = g_win_open_ns.load(std::memory_order_relaxed), now = ga_now_ns();
    return g_win_closed_ns.load(std::memory_order_relaxed) + (open && now > open ? now - open : 0);
}

/* Integer record weight from a fixed-point one, rounded up with probability equal
 * to the fraction: unbiased, and ga_kernel_record.weight stays an integer. */
uint32_t ga_window_round_weight(uint32_t weight_q, uint64_t *rng) noexcept {
    uint32_t w = weight_q / WQ, frac = weight_q % WQ;
    if (frac && (uint32_t)(splitmix(rng) % WQ) < frac) w++;
    return w;
}
