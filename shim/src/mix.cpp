/* mix.cpp: whether the launchers' mix changed inside the current period (window.cpp
 * then ends the period there: a cut).
 *
 * Why: a period's one window stands for the kernel mix of the whole period. A job
 * that changes what it runs inside a period (a training loop that evaluates every
 * N steps, a server that moves from prefill to decode, the benchmark's job that
 * alternates eager and MLP code every 30 s) gets the window's side of the change for
 * all of it: its launches are counted right, but the kernels are those of one side.
 * On an H200 the MLP kernels of such a job read +8.5 and +11.1 % per interval
 * (median), against 0.13 % for each job alone (docs/benchmarks.md).
 *
 * The launch counter (launch_hook.cpp) counts each launch function behind its slots
 * apart: cudart's `__cudaLaunchKernel` (PyTorch's own kernels), the driver's
 * `cuLaunchKernelEx` behind cuBLAS's table, `cuLaunchKernel` behind ATen's NVRTC
 * table (torch.compile), the graph launches. Their shares are a cheap signature of
 * what the job runs: eager code is all `__cudaLaunchKernel`, an MLP of Linear + GELU
 * half each. At every poll the shares of the last RECENT_NS (two polls at the
 * defaults) are set against the period's before them: a total-variation distance of
 * CHANGED or more, over MIN_HITS hits on each side, is a change. Same-mix changes
 * (one eager model for another) are not seen; nor is a change in the launch rate
 * alone, which moves no kernel's share (the span's shape places the launches).
 *
 * A job's mix wanders inside each step, so the recent side spans two polls, and a
 * period only starts to be compared after MIN_BASE_NS. Wrong cuts cost nothing in
 * fidelity (the two parts are periods like any other); what bounds their cost is
 * window.cpp's rule for cuts (one window at least between two cuts, and a cut after
 * its period's window lengthens the next period by what it cut off).
 * Poller thread only. */
#include "ga_internal.h"
#include "launch_hook.h"

namespace {
constexpr uint64_t RECENT_NS = 200000000ull;   /* the recent side: 200 ms at least */
constexpr uint64_t MIN_BASE_NS = 300000000ull; /* the period's side before it */
constexpr double MIN_HITS = 256;
constexpr double CHANGED = 0.3; /* eager against an MLP of Linear + GELU: 0.5 */
constexpr uint32_t RING = 16;   /* polls kept: RECENT_NS of them at the shortest poll */

struct snap {
    uint64_t t, epoch;
    uint32_t n;
    uint64_t h[GA_HOOK_TARGETS];
};
snap g_base;      /* the period's start (or the counter's last new slots) */
snap g_ring[RING]; /* the last polls */
uint32_t g_n;

void take(snap *s, uint64_t now) {
    s->t = now, s->epoch = ga_hook_epoch();
    s->n = ga_hook_hits_each(s->h, GA_HOOK_TARGETS);
}

/* b - a per function, into d; their sum */
double diff(const snap &a, const snap &b, double *d) {
    double sum = 0;
    for (uint32_t i = 0; i < b.n; i++) {
        uint64_t x = i < a.n ? a.h[i] : 0;
        d[i] = b.h[i] > x ? (double)(b.h[i] - x) : 0;
        sum += d[i];
    }
    return sum;
}
} // namespace

void ga_mix_reset(uint64_t now_ns) noexcept {
    take(&g_base, now_ns);
    g_n = 0;
}

void ga_mix_sample(uint64_t now_ns) noexcept {
    if (!ga_cfg.launch_counter || !ga_cfg.mix_cuts) return;
    snap &cur = g_ring[g_n % RING];
    take(&cur, now_ns);
    g_n++;
    /* new slots (a table found): their hits were not counted before, so the shares
     * move without the job changing; compare from here */
    if (cur.epoch != g_base.epoch) {
        g_base = cur;
        g_n = 0;
    }
}

bool ga_mix_changed(uint64_t *since_ns, uint64_t *hits_since) noexcept {
    if (!ga_cfg.launch_counter || !ga_cfg.mix_cuts || !g_n) return false;
    const snap &cur = g_ring[(g_n - 1) % RING]; /* the last poll's (ga_mix_sample) */
    /* the recent side: from the newest poll RECENT_NS before this one */
    const snap *mid = nullptr;
    for (uint32_t k = 1; k < g_n && k < RING; k++) {
        const snap &s = g_ring[(g_n - 1 - k) % RING];
        if (cur.t - s.t >= RECENT_NS) {
            mid = &s;
            break;
        }
    }
    if (!mid || mid->t < g_base.t + MIN_BASE_NS) return false;
    double before[GA_HOOK_TARGETS], recent[GA_HOOK_TARGETS];
    double nb = diff(g_base, *mid, before), nr = diff(*mid, cur, recent);
    if (nb < MIN_HITS || nr < MIN_HITS) return false;
    double tv = 0;
    for (uint32_t i = 0; i < cur.n; i++) {
        double p = i < mid->n ? before[i] / nb : 0, q = recent[i] / nr;
        tv += p > q ? p - q : q - p;
    }
    if (tv * 0.5 < CHANGED) return false;
    *since_ns = mid->t, *hits_since = 0;
    for (uint32_t i = 0; i < mid->n; i++) *hits_since += mid->h[i];
    return true;
}
