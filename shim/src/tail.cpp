/* tail.cpp: each window's tail, where kernel activity stays on alone, to measure
 * what the count phase's launch callbacks cost a launch in this process.
 *
 * Why: with CUPTI torn down between windows, the launches there are extrapolated
 * from the count phase's rate (window.cpp). The count phase's own callbacks slow a
 * launch-bound thread by their cost per launch, c, so its rate reads low. A fixed
 * share of the window's slowdown (budget.cpp's K_CB, gone) took that as 1.0 % for eager
 * PyTorch on an H100 where the job's own step times read 1.8 % (in one process,
 * `bench/gpu/inprocess.py`'s count phases), and as 5.2 % for an MLP that read no
 * slower at all: its windows slow it on the GPU, where no callback is. So c is
 * measured, per process: after each window the callbacks go off and kernel
 * activity stays on for half a window; that tail's launches are counted by their
 * kernel records, those of the cycle past the window's own launches (which the
 * callbacks counted). Not by correlation id: on an H100 about half the tail's
 * records carried ids of the window's launches and joined the window as its own.
 * With 1/r the time per launch,
 *     1/r_window = 1/r0 + a + c,   1/r_tail = 1/r0 + a
 * so c = 1/r_window - 1/r_tail, whatever the activity costs (a) and wherever it
 * lands (CPU or GPU), and the undisturbed rate is 1/r0 = 1/r_count - c. Times per
 * launch are on the busy clock where it stands (the launching threads' CPU time). A
 * GPU-bound process launches as fast in all three: c = 0, no correction. The
 * window's time leaves out what its stack samples took (a count phase takes none).
 * The tail's records are dropped (no callback sampled a stack in it), not
 * weighed; its launches go at the tail's rate in the period's extrapolation.
 *
 * Poller thread, but for ga_tail_record (the buffer callbacks). */
#include <stdio.h>

#include "ga_internal.h"

#define MIN_LAUNCHES 50

/* Records since the window opened, and how many of them are the window's (its
 * launches; all, while it is open): the rest are the tail's. */
static std::atomic<uint64_t> g_cycle_records, g_keep{UINT64_MAX};
static std::atomic<int> g_counting; /* a tail's records are being counted, until folded */
static std::atomic<uint64_t> g_tail_records;
static std::atomic<uint64_t> g_open_ts; /* the CUPTI time this cycle's window opened (0: not known) */
static std::atomic<uint64_t> g_close_ts; /* and closed, its callbacks off (0: open, or not known) */
static uint64_t g_t0, g_ns;                  /* the tail's start and length (0: running) */
static double g_win_ns_per_launch;           /* the window's, just before the tail */
/* The same on the busy clock (busy.cpp), where it stands: a thread that idled in the
 * window or the tail (a job between requests) would read a callback cost of its idle
 * time, and preemption on a loaded host the same. */
static double g_win_busy_per_launch;
static uint64_t g_busy_t0, g_busy_ns;
static ga_span g_period_tail;                 /* tail time in the current period */
static ga_span g_period_tail_busy;            /* and on the busy clock (busy.cpp) */
static uint64_t g_folded, g_folded_launches; /* tails measured, and their launches (exit line) */

void ga_tail_reset(void) noexcept {
    g_counting.store(0, std::memory_order_relaxed);
    g_keep.store(UINT64_MAX, std::memory_order_relaxed);
    g_t0 = g_ns = 0;
    g_period_tail = g_period_tail_busy = {};
}

void ga_tail_window_opened(uint64_t cupti_ts) noexcept {
    ga_tail_fold();
    g_keep.store(UINT64_MAX, std::memory_order_relaxed);
    g_cycle_records.store(0, std::memory_order_relaxed);
    g_close_ts.store(0, std::memory_order_relaxed);
    g_open_ts.store(cupti_ts, std::memory_order_release);
}

void ga_tail_begin(uint64_t now_ns, uint64_t win_ns, uint64_t win_launches, uint64_t win_busy,
                   uint64_t close_ts) noexcept {
    g_tail_records.store(0, std::memory_order_relaxed);
    g_win_ns_per_launch = win_launches >= MIN_LAUNCHES ? (double)win_ns / (double)win_launches : -1;
    g_win_busy_per_launch = win_launches >= MIN_LAUNCHES && win_busy ? (double)win_busy / (double)win_launches : -1;
    g_busy_t0 = ga_busy_now(), g_busy_ns = 0;
    g_t0 = now_ns, g_ns = 0;
    g_period_tail.on(now_ns);
    g_period_tail_busy.on(ga_busy_now());
    g_counting.store(1, std::memory_order_relaxed);
    g_close_ts.store(close_ts, std::memory_order_relaxed);
    g_keep.store(win_launches, std::memory_order_release);
}

void ga_tail_end(uint64_t now_ns) noexcept {
    if (!g_t0 || g_ns) return;
    g_ns = now_ns - g_t0;
    g_period_tail.off(now_ns);
    g_busy_ns = ga_busy_now() - g_busy_t0;
    g_period_tail_busy.off(ga_busy_now());
}

bool ga_tail_record(bool unseen, uint64_t start_ns) noexcept {
    /* A record no callback noted whose kernel started before this window opened: an
     * earlier cycle's tail, its buffer delivered late (a loaded host: on the 2-core
     * VM a suite's paced loop had up to 1 196 of them in 3 s). Counted in this cycle,
     * it would make the window's own last records the tail's: dropped, their launches
     * counted, and it weighed in their place. (50 us: CUPTI's clock against the
     * GPU's, as weights.cpp's check of a window's records.) */
    uint64_t open = g_open_ts.load(std::memory_order_acquire);
    if (unseen && open && start_ns + 50000 < open) return true;
    /* One that started after this window closed: this tail's, whenever its buffer
     * comes. Two buffers can be handed over at once (the mock's worker and a
     * flushing thread do; CUPTI's callbacks come from both too), so the tail's can be
     * read before the window's own records, and in a count place it would push the
     * window's last record out the same way (588 of 97 034 once in a CI suite). A
     * window's launch that started after the close was queued, and its callback
     * noted it; one no callback sees (an internal launch) queued so goes with the
     * tail, its record lost. */
    uint64_t keep = g_keep.load(std::memory_order_acquire);
    uint64_t close = keep != UINT64_MAX ? g_close_ts.load(std::memory_order_relaxed) : 0;
    if (unseen && close && start_ns > close + 50000) {
        g_tail_records.fetch_add(1, std::memory_order_relaxed);
        return true;
    }
    uint64_t n = g_cycle_records.fetch_add(1, std::memory_order_relaxed) + 1;
    if (GA_LIKELY(n <= keep)) return false;
    g_tail_records.fetch_add(1, std::memory_order_relaxed);
    return true;
}

/* The finished tail's measure of c, to the budget (which keeps their median). */
void ga_tail_fold(void) noexcept {
    if (!g_counting.load(std::memory_order_relaxed) || !g_ns) return;
    g_counting.store(0, std::memory_order_release);
    uint64_t n = g_tail_records.load(std::memory_order_relaxed);
    if (n >= MIN_LAUNCHES && g_win_busy_per_launch > 0 && g_busy_ns) {
        ga_budget_note_tail(g_win_busy_per_launch - (double)g_busy_ns / (double)n);
        g_folded++, g_folded_launches += n;
    } else if (n >= MIN_LAUNCHES && g_win_ns_per_launch > 0) {
        ga_budget_note_tail(g_win_ns_per_launch - (double)g_ns / (double)n);
        g_folded++, g_folded_launches += n;
    }
    g_t0 = g_ns = 0;
}

/* Tail time since the last call, for the period that ends now. */
uint64_t ga_tail_period_ns(uint64_t now_ns) noexcept { return g_period_tail.take(now_ns); }
uint64_t ga_tail_period_busy(void) noexcept { return g_period_tail_busy.take(ga_busy_now()); }

void ga_tail_stats(uint64_t *tails, uint64_t *launches) noexcept {
    *tails = g_folded, *launches = g_folded_launches;
}
