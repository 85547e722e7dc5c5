/* count_cycle.cpp: experiment GPU_AGENT_EXP_COUNT=cycle (the benchmark build): a
 * free count piece in a CUPTI cycle of its own.
 *
 * Why: the count phase is always the slot just before a window, so it never
 * samples the slots right after one; in 60 s runs under `gpu-agent record` on an
 * H100 it ran 3.5-5.3 % faster than the loop's average (docs/benchmarks.md,
 * "Fidelity period by period"). A second piece at a random place would sample
 * them, but CUPTI allows no second enable of the launch callbacks before a window
 * in one cycle (it mixes the records' correlation ids; tests/test_mock_cuda.py).
 * So here the free piece is a cycle of its own: the launch callbacks on for a slot
 * (the cycle's first enable) at a uniformly random place in the period outside the
 * window's zone, then a teardown (finalize at the next API exit) instead of
 * turning them off; the count phase and window then start a fresh cycle. It costs
 * one more teardown and re-subscription a period. The period's rate pools the
 * free piece with the count phase (window.cpp). GPU_AGENT_EXP_COUNT=cycle-edge puts
 * every piece at its latest place, ending where the count phase begins (the case
 * tests/test_periods.py checks: the piece's cycle must end before the count's).
 *
 * Poller thread only. */
#include <stdio.h>
#include <unistd.h>

#include "../ga_internal.h"

static uint64_t g_lo, g_hi;        /* this period's free piece (hi 0: none) */
static uint64_t g_t0, g_seq0;      /* the running piece's start (0: none) */
static uint64_t g_n, g_ns;         /* this period's free pieces so far */
static uint64_t g_pieces;          /* pieces counted (exit line) */

void ga_exp_piece_plan(uint64_t start, uint64_t period_ns, uint64_t slot_ns, uint64_t window_lo,
                       uint64_t *rng) noexcept {
    g_hi = 0;
    if (!GA_EXP(count_cycle)) return;
    /* the piece's start: in [start, window_lo - 2 slots] or [window_lo + 3 slots, end - slot] */
    uint64_t end = start + period_ns, zone_hi = window_lo + 3 * slot_ns;
    uint64_t a = window_lo >= start + 2 * slot_ns ? window_lo - 2 * slot_ns - start : 0;
    uint64_t b = end >= zone_hi + slot_ns ? end - slot_ns - zone_hi : 0;
    if (a + b == 0) return;
    if (GA_EXP(count_cycle) == 2 && a) { /* cycle-edge: the latest start, the piece ends at the count phase's edge */
        g_lo = start + a, g_hi = g_lo + slot_ns;
        return;
    }
    uint64_t u = ga_splitmix64(rng) % (a + b);
    g_lo = u < a ? start + u : zone_hi + (u - a);
    g_hi = g_lo + slot_ns;
}

bool ga_exp_piece(uint64_t now_ns, uint64_t *next_edge_ns) noexcept {
    if (!g_hi || now_ns >= g_hi) return false;
    if (now_ns >= g_lo) {
        if (g_hi < *next_edge_ns) *next_edge_ns = g_hi;
        return true;
    }
    if (g_lo < *next_edge_ns) *next_edge_ns = g_lo;
    return false;
}

void ga_exp_piece_started(uint64_t now_ns) noexcept {
    g_t0 = now_ns;
    g_seq0 = ga_launch_seq.load(std::memory_order_relaxed);
}

bool ga_exp_piece_running(void) noexcept { return g_t0 != 0; }

void ga_exp_piece_stopped(uint64_t now_ns) noexcept {
    if (!g_t0) return;
    uint64_t n = ga_launch_seq.load(std::memory_order_relaxed) - g_seq0;
    if (now_ns > g_t0) {
        g_n += n, g_ns += now_ns - g_t0, g_pieces++;
        if (ga_debug_on >= 2)
            ga_debug("free count piece (pid %d): from %.6f s (CLOCK_MONOTONIC) for %.3f ms: %llu launches",
                     (int)getpid(), (double)g_t0 / 1e9, (double)(now_ns - g_t0) / 1e6, (unsigned long long)n);
    }
    g_t0 = 0;
}

void ga_exp_piece_take(uint64_t *launches, uint64_t *ns) noexcept {
    *launches = g_n, *ns = g_ns;
    g_n = g_ns = 0;
}

uint64_t ga_exp_pieces(void) noexcept { return g_pieces; }
