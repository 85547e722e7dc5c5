/* count.cpp: the count pieces, where the launch callbacks alone measure the
 * process's launch rate between windows (with CUPTI torn down there, nothing else
 * counts those launches; window.cpp extrapolates them at this rate).
 *
 * Why pieces: a job's launch rate wanders. On an H100, eager PyTorch's blocks of
 * 50 ms varied by 8 % and stayed correlated for about half a second
 * (`python -m bench.gpu overhead --method inprocess`), so one count phase of a
 * slot (100 ms) before each window read its 1.7 s period's rate with a 6 %
 * spread, and a 60 s run's launches within +-1.5-3 %. The same count time spread
 * over the period reads it far closer (stratified sampling: 2.5 % with 4 pieces
 * of 50 ms, 1.5 % with 8, on the same trace; shorter pieces sample more of it).
 * So each period is cut into PIECES equal strata, and each stratum has one piece
 * of an eighth of a slot at a random offset (no fixed phase of a periodic job). A piece that would meet the window
 * (from its opening until a slot after its end: its tail, its teardown, CUPTI up
 * again) is left out; collection.cpp also starts none while a tail runs or CUPTI
 * is down. The period's rate is its pieces' launches over their time; a period
 * with under 1 ms of them keeps the last rate.
 *
 * Poller thread only. */
#include "ga_internal.h"

#define PIECES 16u
#define PER_SLOT 8u /* a piece is an eighth of a slot: two slots of count time a period */
#define MIN_NS 1000000ull /* 1 ms */

static uint64_t g_start, g_stratum, g_len, g_ex_lo, g_ex_hi; /* this period's pieces, the window's zone */
static uint64_t g_off[PIECES];
static uint64_t g_t0, g_seq0;       /* the running piece's start (0: none) */
static uint64_t g_n, g_ns;          /* this period's pieces so far */
static double g_last = -1;          /* launches per ns of the last period with pieces; < 0: none */
static uint64_t g_all_n, g_all_ns;  /* every piece's (exit line) */

void ga_count_reset(void) noexcept {
    g_t0 = g_n = g_ns = g_len = 0;
    g_last = -1;
}

void ga_count_plan(uint64_t start, uint64_t period_ns, uint64_t slot_ns, uint64_t window_lo,
                   uint64_t *rng) noexcept {
    g_start = start;
    g_stratum = period_ns / PIECES;
    g_len = slot_ns / PER_SLOT < g_stratum ? slot_ns / PER_SLOT : g_stratum;
    g_ex_lo = window_lo, g_ex_hi = window_lo + 2 * slot_ns;
    for (unsigned i = 0; i < PIECES; i++)
        g_off[i] = g_stratum > g_len ? ga_splitmix64(rng) % (g_stratum - g_len) : 0;
}

double ga_count_slots(void) noexcept { return (double)PIECES / PER_SLOT; }

bool ga_count_piece(uint64_t now_ns, uint64_t *next_edge_ns) noexcept {
    if (!g_len) return false;
    for (uint64_t i = now_ns > g_start ? (now_ns - g_start) / g_stratum : 0; i < PIECES; i++) {
        uint64_t lo = g_start + i * g_stratum + g_off[i], hi = lo + g_len;
        if (hi <= now_ns || (hi > g_ex_lo && lo < g_ex_hi)) continue;
        if (now_ns >= lo) {
            if (hi < *next_edge_ns) *next_edge_ns = hi;
            return true;
        }
        if (lo < *next_edge_ns) *next_edge_ns = lo;
        return false;
    }
    return false;
}

void ga_count_started(uint64_t now_ns) noexcept {
    g_t0 = now_ns;
    g_seq0 = ga_launch_seq.load(std::memory_order_relaxed);
}

bool ga_count_running(void) noexcept { return g_t0 != 0; }

void ga_count_stopped(uint64_t now_ns) noexcept {
    if (!g_t0) return;
    uint64_t seq = ga_launch_seq.load(std::memory_order_relaxed);
    if (now_ns > g_t0) {
        g_n += seq - g_seq0, g_ns += now_ns - g_t0;
        g_all_n += seq - g_seq0, g_all_ns += now_ns - g_t0;
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
    if (running) ga_count_started(now_ns);
    return r;
}

void ga_count_total(uint64_t *launches, uint64_t *ns) noexcept { *launches = g_all_n, *ns = g_all_ns; }
