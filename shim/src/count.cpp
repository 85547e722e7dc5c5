/* count.cpp: the count pieces, where the launch callbacks alone measure the
 * process's launch rate between windows (with CUPTI torn down there, nothing else
 * counts those launches; window.cpp extrapolates them at this rate).
 *
 * Why two pieces a period: a job's launch rate wanders. On an H100, eager
 * PyTorch's blocks of 50 ms varied by 8 % and stayed correlated for about half a
 * second (`python -m bench.gpu overhead --method inprocess`), so one slot (100 ms)
 * of counting just before each window read its 1.7 s period's rate with a 6 %
 * spread, and a 60 s run's launches between -3 and +1.6 %. The same count time in
 * two pieces apart reads it with about 4 %, in eight with 1.5 % (sampled from the
 * same trace). But CUPTI fires a callback after its first three enables since a
 * cuptiFinalize only (bench/gpu/callback_toggle.cu: on an H100 the fourth and
 * later enables returned success and fired nothing, a new subscription did not
 * help): between two teardowns the window needs one, its teardown another. So a
 * period has two pieces of a slot: its **count phase**, the slot just before its
 * window (flowing into it, no enable of its own), and one **free piece** at a
 * uniformly random place outside the window's zone (from a slot before its
 * opening until two slots after: the count phase, the window, its tail, its
 * teardown and CUPTI up again). collection.cpp starts a free piece only as the
 * first enable since the last finalize, and the count phase as the second at
 * most; a piece it skips is just not counted. The period's rate is its pieces'
 * launches over their time; a period with under 1 ms of them keeps the last rate.
 *
 * Poller thread only. */
#include <unistd.h>

#include "ga_internal.h"

#define MIN_NS 1000000ull /* 1 ms */

static uint64_t g_free_lo, g_free_hi, g_count_lo, g_count_hi; /* this period's pieces (hi 0: none) */
static uint64_t g_t0, g_seq0;       /* the running piece's start (0: none) */
static int g_kind;                  /* ...GA_PIECE_FREE or GA_PIECE_COUNT_PHASE */
static uint64_t g_n, g_ns;          /* this period's pieces so far */
static double g_last = -1;          /* launches per ns of the last period with pieces; < 0: none */
static uint64_t g_all_n, g_all_ns;  /* every piece's (exit line) */

void ga_count_reset(void) noexcept {
    g_t0 = g_n = g_ns = 0;
    g_free_hi = g_count_hi = 0;
    g_last = -1;
}

void ga_count_plan(uint64_t start, uint64_t period_ns, uint64_t slot_ns, uint64_t window_lo,
                   uint64_t *rng) noexcept {
    uint64_t end = start + period_ns;
    g_count_lo = window_lo >= start + slot_ns ? window_lo - slot_ns : 0;
    g_count_hi = g_count_lo ? window_lo : 0;
    /* the free piece's start: in [start, zone_lo - slot] or [zone_hi, end - slot] */
    uint64_t zone_lo = window_lo > start + slot_ns ? window_lo - slot_ns : start, zone_hi = window_lo + 3 * slot_ns;
    uint64_t a = zone_lo >= start + slot_ns ? zone_lo - slot_ns - start : 0;
    uint64_t b = end >= zone_hi + slot_ns ? end - slot_ns - zone_hi : 0;
    g_free_hi = 0;
    if (a + b == 0) return;
    uint64_t u = ga_splitmix64(rng) % (a + b);
    g_free_lo = u < a ? start + u : zone_hi + (u - a);
    g_free_hi = g_free_lo + slot_ns;
}

double ga_count_slots(void) noexcept { return 2.0; }

int ga_count_piece(uint64_t now_ns, uint64_t *next_edge_ns) noexcept {
    uint64_t lo[2] = {g_free_lo, g_count_lo}, hi[2] = {g_free_hi, g_count_hi};
    int in = 0;
    for (int i = 0; i < 2; i++) {
        if (!hi[i] || hi[i] <= now_ns) continue;
        if (now_ns >= lo[i]) {
            in = i ? GA_PIECE_COUNT_PHASE : GA_PIECE_FREE;
            if (hi[i] < *next_edge_ns) *next_edge_ns = hi[i];
        } else if (lo[i] < *next_edge_ns) {
            *next_edge_ns = lo[i];
        }
    }
    return in;
}

void ga_count_started(uint64_t now_ns, int piece) noexcept {
    g_t0 = now_ns, g_kind = piece;
    g_seq0 = ga_launch_seq.load(std::memory_order_relaxed);
}

bool ga_count_running(void) noexcept { return g_t0 != 0; }

void ga_count_stopped(uint64_t now_ns) noexcept {
    if (!g_t0) return;
    uint64_t seq = ga_launch_seq.load(std::memory_order_relaxed);
    if (now_ns > g_t0) {
        g_n += seq - g_seq0, g_ns += now_ns - g_t0;
        g_all_n += seq - g_seq0, g_all_ns += now_ns - g_t0;
        if (ga_debug_on >= 2) /* tests/test_count_pieces.py sets each beside the job's own launches */
            ga_debug("count piece (pid %d): %s from %.6f s (CLOCK_MONOTONIC) for %.3f ms: %llu launches",
                     (int)getpid(), g_kind == GA_PIECE_FREE ? "free" : "count phase", (double)g_t0 / 1e9,
                     (double)(now_ns - g_t0) / 1e6, (unsigned long long)(seq - g_seq0));
    }
    g_t0 = 0;
}

/* This period's pieces so far (for the budget's measure of a window). */
void ga_count_so_far(uint64_t *launches, uint64_t *ns) noexcept {
    *launches = g_ns >= MIN_NS ? g_n : 0, *ns = g_ns >= MIN_NS ? g_ns : 0;
}

double ga_count_rate(void) noexcept { return g_ns >= MIN_NS ? (double)g_n / (double)g_ns : g_last; }

/* The period ends at now_ns: its rate (or the last), and the next period's pieces
 * start counting afresh (a piece running across the edge is split there). */
double ga_count_period_end(uint64_t now_ns) noexcept {
    bool running = g_t0 != 0;
    ga_count_stopped(now_ns);
    double r = ga_count_rate();
    g_last = r;
    g_n = g_ns = 0;
    if (running) ga_count_started(now_ns, g_kind);
    return r;
}

void ga_count_total(uint64_t *launches, uint64_t *ns) noexcept { *launches = g_all_n, *ns = g_all_ns; }
