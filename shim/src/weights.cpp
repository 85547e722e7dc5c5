/* weights.cpp: the record weights of the collection windows (window.cpp holds
 * their schedule): each period's launches / its window's launches, published per
 * period, and the graph replays CUPTI mis-times left out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ga_internal.h"

bool ga_window_period_ended; /* set at a period's end; the poller releases its records */

/* ---- record weights: each period's launches / its window's launches ----
 * A windowed record stands for N records (one slot in N is a window) only if
 * windows cost nothing. They do not: CUPTI activity costs CPU per launch, so a
 * launch-bound loop launches more slowly inside windows, and weighting by N ran
 * 7-17 % low on an H200. So the launch callbacks
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
 * without bias (held.cpp). */
#define WQ GA_WQ
std::atomic<uint64_t> ga_launch_seq;
/* Poller thread only (and at detach/exit): the counts at the current period's
 * start, the launches carried from periods whose window saw none, the last
 * published weight (for a period with no windowed launch, and for what is still
 * held at a detach or exit). */
static uint64_t g_snap_all, g_snap_in, g_carry_all;
/* Spans (CLOCK_MONOTONIC): the current period's start, and where the carried
 * launches began. Each published weight says which stretch of time its records
 * stand for (ga_kernel_record.span_*): the agent spreads them over its intervals
 * by overlap, so that an interval holds the launches made in it, not whole
 * periods published one or two periods late. */
static uint64_t g_cur_start, g_carry_start;
static uint32_t g_last_q;
static uint32_t g_slots = 1;               /* N of the current period (the schedule's) */
static ga_extrapolate_fn g_extrapolate;    /* its launches from the counted ones (the schedule's) */
/* The last ended period with windowed launches, not yet published: a period's
 * weight is published one period late, so that the launches of a following
 * period whose window saw none can still join it. Above all at an exit or a
 * detach: the partial last period's window has often not opened yet, and its
 * launches (up to one period, 200 ms at the defaults) had no record to stand
 * for them; on an H200 that lost 3.1 % of a 4 s eager run's launches.
 * Seq 0: none. */
static uint32_t g_pend_seq;
static uint64_t g_pend_in;
static ga_published_span g_pend; /* its span, launches and their pieces */
/* ga_weights_split: the next period's end gives [its start, g_split_at) and about
 * g_split_n launches to the pending period (0: none) */
static uint64_t g_split_at, g_split_n, g_split_in;
static uint32_t g_split_corr;
/* ga_weights_hand_on: the next period's end gives [g_hand_at, its end) and about
 * g_hand_n launches to the period after it (0: none) */
static uint64_t g_hand_at, g_hand_n;

void ga_weights_hand_on(uint64_t at_ns, double launches) noexcept {
    g_hand_at = at_ns, g_hand_n = launches > 0 ? (uint64_t)(launches + 0.5) : 0;
}

void ga_weights_split(uint64_t at_ns, double launches, uint64_t in_at, uint32_t corr_at) noexcept {
    g_split_at = at_ns, g_split_n = launches > 0 ? (uint64_t)(launches + 0.5) : 0;
    g_split_in = corr_at && in_at > g_snap_in ? in_at - g_snap_in : 0, g_split_corr = corr_at;
}
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
    if (g_extrapolate) *all = g_extrapolate(*in, *all, final); /* with teardowns between windows */
}

/* Period numbers. A launch in a window notes its period by correlation id, so
 * that its record gets that period's weight whenever it completes: a GPU-bound
 * loop runs tens of ms behind its launches, so records of a late window arrive
 * after their period ended (released then with the next period's weight, one
 * H200 torch graph replay read +729 %: that next window caught a sync gap, so
 * its own launches were few and the weight huge). */
#define CORR_TAB (1u << 16)
std::atomic<uint64_t> ga_stat_late_records;
#define QRING GA_QRING /* the period rings, as held.cpp's (ga_period_seq: the current period, 0: none) */
static std::atomic<uint64_t> g_corr_period[CORR_TAB];  /* corr << 32 | period */

/* The CUPTI time each recent period's window opened, for the sanity check of
 * its records: a kernel launched in a window cannot start before it opened. */
static std::atomic<uint64_t> g_period_open_ts[QRING];
static std::atomic<uint32_t> g_period_open_seq[QRING];

void ga_weights_period_opened(uint64_t cupti_ts) noexcept {
    uint32_t seq = ga_period_seq.load(std::memory_order_relaxed);
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

void ga_weights_marks(uint64_t *in, uint32_t *corr) noexcept {
    uint32_t seq = ga_period_seq.load(std::memory_order_relaxed);
    uint64_t v = g_period_last_launch[seq % QRING].load(std::memory_order_relaxed);
    *in = ga_stat_launches.load(std::memory_order_relaxed);
    *corr = (uint32_t)(v >> 32) == seq ? (uint32_t)v : 0;
}

void ga_window_note_launch(uint32_t correlation_id) noexcept {
    uint32_t seq = ga_period_seq.load(std::memory_order_relaxed);
    g_corr_period[correlation_id & (CORR_TAB - 1)].store((uint64_t)correlation_id << 32 | seq,
                                                         std::memory_order_relaxed);
    g_period_last_launch[seq % QRING].store((uint64_t)seq << 32 | correlation_id,
                                            std::memory_order_relaxed);
}

/* The period of a launch at a window's edge: none. */
#define OUTSIDE 0xffffffffu

void ga_window_note_outside(uint32_t correlation_id) noexcept {
    g_corr_period[correlation_id & (CORR_TAB - 1)].store((uint64_t)correlation_id << 32 | OUTSIDE,
                                                         std::memory_order_relaxed);
}

uint32_t ga_window_period_of(uint32_t correlation_id, bool *unseen, bool *outside, bool *late) noexcept {
    uint64_t v = g_corr_period[correlation_id & (CORR_TAB - 1)].load(std::memory_order_relaxed);
    if ((uint32_t)(v >> 32) == correlation_id && (uint32_t)v == OUTSIDE) {
        *unseen = *outside = true;
        return ga_period_seq.load(std::memory_order_relaxed);
    }
    if ((uint32_t)(v >> 32) == correlation_id && (uint32_t)v) return (uint32_t)v;
    /* Not noted: no launch callback saw this launch (a launch path CUPTI reports
     * no callback for), or its entry was overwritten. The current period's, the
     * likeliest. The caller counts it: the weights assume the launches the
     * callbacks miss are the same share in and out of the windows. An entry that
     * holds a newer launch says the record came after a launch CORR_TAB ids or
     * more after its own was noted (a flush held back: a loaded host's poller,
     * preempted past a window's end; the mock's 200 000 launches/s fill the table
     * in 0.33 s), so whether a callback had noted its own cannot be told: *late
     * (the caller counts it in ga_stat_late_records). */
    *late = v && (int32_t)((uint32_t)(v >> 32) - correlation_id) > 0;
    *unseen = true;
    return ga_period_seq.load(std::memory_order_relaxed);
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
struct due_period { uint32_t seq; uint64_t in; ga_published_span span; };
#define DUE_MAX 8u
static due_period g_due[DUE_MAX];
static unsigned g_due_n;
static std::atomic<uint64_t> g_period_last_corr[QRING]; /* period << 32 | newest corr left out */
std::atomic<uint64_t> ga_stat_left_out_launches, ga_stat_left_out_records, ga_stat_left_out_late;

static void carry(uint64_t launches, uint64_t since) {
    if (!g_carry_all) g_carry_start = since;
    g_carry_all += launches;
}

static void publish_now(uint32_t seq, uint64_t in, const ga_published_span &span) {
    uint64_t all = span.all, start = span.start, end = span.end;
    uint32_t newest = 0;
    uint64_t left = ga_activity_leave_out_last_replays(seq, &newest);
    g_period_last_corr[seq % QRING].store((uint64_t)seq << 32 | newest, std::memory_order_relaxed);
    ga_stat_left_out_launches.fetch_add(left, std::memory_order_relaxed);
    if (in > left) {
        g_last_q = to_q((double)all / (double)(in - left));
    } else {
        /* Every windowed launch was left out: no record stands for the period's
         * launches, which go to the next period with windowed launches. */
        carry(all, start);
        if (!g_last_q) g_last_q = g_slots * WQ;
    }
    ga_shape_publish(span); /* before the span's records go (held.cpp) */
    ga_weight_publish(seq, g_last_q, start, end);
    if (in > left && ga_debug_on >= 2) /* what the records stand for, once (tests/test_intervals.py) */
        ga_debug("period (pid %d): %llu launches published over %llu records", (int)getpid(),
                 (unsigned long long)all, (unsigned long long)(in - left));
}

/* A GPU-bound job runs its window's kernels long after their launches, and the
 * last traced replays can only be told once their records are in: a period
 * whose held records do not reach its window's last launch yet waits, up to
 * DUE_WAIT periods (a launch traced by no record, at the window's closing edge,
 * would otherwise hold it forever). `all`: publish everything now. */
#define DUE_WAIT 4u
static void publish_due(bool all = true) {
    unsigned keep = 0;
    uint32_t cur = ga_period_seq.load(std::memory_order_relaxed);
    for (unsigned i = 0; i < g_due_n; i++) {
        const due_period d = g_due[i];
        uint64_t last = g_period_last_launch[d.seq % QRING].load(std::memory_order_relaxed);
        bool waiting = !all && cur - d.seq <= DUE_WAIT && (uint32_t)(last >> 32) == d.seq &&
                       ga_activity_newest_held(d.seq) < (uint32_t)last;
        if (waiting) g_due[keep++] = d;
        else publish_now(d.seq, d.in, d.span);
    }
    g_due_n = keep;
}

static void publish_pending(void) {
    if (!g_pend_seq) return;
    if (g_due_n == DUE_MAX) publish_due(); /* too many waiting: no more waiting */
    g_due[g_due_n++] = {g_pend_seq, g_pend_in, g_pend};
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
static void end_period(uint64_t edge_ns, bool first = false, bool final = false) {
    uint32_t seq = ga_period_seq.load(std::memory_order_relaxed);
    uint64_t start = g_cur_start;
    g_cur_start = edge_ns;
    if (!first && seq) {
        uint64_t all, in;
        period_counts(&all, &in, final);
        if (GA_EXP(cb_windowed)) { /* no counts outside windows */
            g_last_q = g_slots * WQ;
            ga_weight_publish(seq, g_last_q, start, edge_ns);
        } else if (!in) {
            /* its part after a change goes on to the next window (window.cpp's hand-on) */
            uint64_t hand = g_hand_at > start && g_hand_at < edge_ns ? (g_hand_n < all ? g_hand_n : all) : 0;
            all -= hand;
            if (g_pend_seq) {
                g_pend.all += all;
                g_pend.end = hand ? g_hand_at : edge_ns; /* the pending records stand for this period too */
                ga_stat_joined.fetch_add(all, std::memory_order_relaxed);
            } else {
                carry(all, start);
            }
            if (hand) carry(hand, g_hand_at);
            /* Held records should not wait long: a period with no launch at all
             * (idle) ends the wait, and so does a pending period grown old. */
            if (!all && !hand) publish_pending();
            else if (seq - g_pend_seq >= QRING / 4) publish_pending();
            /* for stragglers only (records of launches no callback saw) */
            ga_weight_publish(seq, g_last_q ? g_last_q : g_slots * WQ, start, edge_ns);
        } else {
            /* a period whose window saw the new side (window.cpp's split): the part
             * before the change is the pending period's, whose window saw the old
             * side; the window's own launches before it, if it opened before the
             * change, leave its count, and their records go (held.cpp) */
            if (g_split_at > start && g_split_at < edge_ns && g_pend_seq && in > g_split_in &&
                all > in - g_split_in) {
                if (g_split_in) in -= g_split_in, ga_weight_drop_through(seq, g_split_corr);
                uint64_t x = g_split_n < all - in ? g_split_n : all - in;
                g_pend.all += x, g_pend.end = g_split_at;
                all -= x, start = g_split_at;
            }
            /* a period whose window saw the old side, where the mix changed after it
             * (window.cpp's hand-on): its part after the change goes with the next
             * period's window, on the new side */
            uint64_t hand = 0, end = edge_ns;
            if (g_hand_at > start && g_hand_at < edge_ns && all > in) {
                hand = g_hand_n < all - in ? g_hand_n : all - in;
                all -= hand, end = g_hand_at;
            }
            publish_pending();
            g_pend_seq = seq, g_pend_in = in;
            g_pend = {g_carry_all ? g_carry_start : start, start, end, end, g_carry_all, all, all + g_carry_all};
            g_carry_all = 0;
            if (hand) carry(hand, end);
        }
    }
    g_split_at = g_split_in = 0, g_split_corr = 0, g_hand_at = 0;
    /* At a detach or exit, launches carried on to a window that never came join the
     * pending period (its span covers them): in its kernels rather than unweighed. */
    if (final && g_carry_all && g_pend_seq) {
        g_pend.all += g_carry_all, g_pend.end = edge_ns;
        ga_stat_joined.fetch_add(g_carry_all, std::memory_order_relaxed);
        g_carry_all = 0;
    }
    if (final) publish_pending();
    ga_period_seq.store(seq + 1 ? seq + 1 : 1, std::memory_order_relaxed);
}

void ga_weights_period_edge(bool first, uint32_t slots, ga_extrapolate_fn extrapolate, uint64_t start_ns) noexcept {
    g_extrapolate = extrapolate;
    g_slots = slots; /* the new period's, as the schedule has it now */
    ga_weight_set_default(slots * WQ);
    if (first) {
        uint64_t all, in;
        period_counts(&all, &in, false); /* the snapshots start here */
        g_due_n = 0;
        g_carry_all = 0;
        g_last_q = 0;
        g_pend_seq = 0;
        ga_window_period_ended = false;
        end_period(start_ns, true);
        return;
    }
    /* Counted at the edge itself; held records are released a moment later. */
    end_period(start_ns);
    ga_window_period_ended = true;
}

std::atomic<uint64_t> ga_stat_unweighted;

uint32_t ga_weights_release(bool period_end) noexcept {
    if (ga_cfg.duty_cycle <= 1) return 0;
    /* A detach or exit: the partial period ends here, and its launches join the
     * pending period's if its window saw none. */
    if (!period_end) end_period(ga_now_ns(), false, true);
    publish_due(!period_end); /* after the flush; at a detach or exit, all of them */
    if (!period_end && g_carry_all) {
        /* Only launches with no window launch before them at all (or whose
         * window's launches were all left out) have no record to stand for them:
         * counted. */
        ga_stat_unweighted.fetch_add(g_carry_all, std::memory_order_relaxed);
        g_carry_all = 0;
    }
    ga_window_period_ended = false;
    return g_last_q;
}

/* Launches of window-less periods joined to the pending period, counted only now (at
 * the next period's rate, window.cpp's busy carry): they join it too, before it goes
 * out (its span covers them). False when nothing is pending. */
bool ga_weights_add_to_pending(uint64_t launches) noexcept {
    if (!g_pend_seq) return false;
    g_pend.all += launches;
    ga_stat_joined.fetch_add(launches, std::memory_order_relaxed);
    return true;
}

uint64_t ga_weights_published_until(void) noexcept {
    /* The oldest launch whose records have not gone yet: of the periods due or
     * pending, of the carried launches, else the current period's. */
    uint64_t until = g_cur_start;
    for (unsigned i = 0; i < g_due_n; i++)
        if (g_due[i].span.start < until) until = g_due[i].span.start;
    if (g_pend_seq && g_pend.start < until) until = g_pend.start;
    if (g_carry_all && g_carry_start < until) until = g_carry_start;
    return until;
}
