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
 * period only starts to be compared after MIN_BASE_NS. The recent side may start at
 * any poll kept that leaves it RECENT_NS, not only the newest: a side before the
 * change that holds some of the new side's launches moved less than CHANGED (on an
 * H200, MLP code 200 ms into a period, then eager code at twice its launch rate: the
 * 300 ms before the newest such poll held 0.75 of eager's function where MLP's half
 * was 0.5, so the change was never seen, and the period's 1.25 s of eager launches
 * took the MLP window's kernels: an interval's GPU ns +22.7 %;
 * tests/test_shim_estimator.py). Wrong cuts cost nothing in
 * fidelity (the two parts are periods like any other); what bounds their cost is
 * window.cpp's rule for cuts (one window at least between two cuts, and a cut after
 * its period's window lengthens the next period by what it cut off).
 *
 * Where the change lies is the poll that parts the period into the two most
 * different sides (locate): window.cpp gives the part before it and the part after
 * it each to a window that saw its side. A period that ends as planned is looked at
 * too (ga_mix_changed_lately), with no RECENT_NS: a change too recent for a cut can
 * still be placed, and placing it wrongly moves launches between two periods of the
 * same mix, which costs nothing. Poller thread only. */
#include "ga_internal.h"
#include "launch_hook.h"

namespace {
constexpr uint64_t RECENT_NS = 200000000ull;   /* the recent side: 200 ms at least */
constexpr uint64_t MIN_BASE_NS = 100000000ull; /* the period's side before it: a slot (the count
                                                * phase); 300 ms missed a change after a window
                                                * in the period's second slot */
constexpr double MIN_HITS = 256;
constexpr double CHANGED = 0.3; /* eager against an MLP of Linear + GELU: 0.5 */
/* Polls kept: where a change lies is looked for among them. A cut waits for the
 * window, its tail and the count phase to end (up to 250 ms more than RECENT_NS on
 * the mock), and the polls come more often than the poll interval around windows:
 * 16 of them missed a change 312 ms back (the mock's 20 ms polls) and put it 95 ms
 * late. */
constexpr uint32_t RING = 64;

struct snap {
    uint64_t t, epoch;
    uint32_t n;
    uint64_t h[GA_HOOK_TARGETS];
    uint64_t in;   /* the windows' launches so far (ga_stat_launches) */
    uint32_t corr; /* the correlation id of the period's last window launch (0: none yet) */
};
snap g_base;      /* the period's start (or the counter's last new slots) */
snap g_ring[RING]; /* the last polls */
uint32_t g_n;

void take(snap *s, uint64_t now) {
    s->t = now, s->epoch = ga_hook_epoch();
    s->n = ga_hook_hits_each(s->h, GA_HOOK_TARGETS);
    ga_weights_marks(&s->in, &s->corr);
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

namespace {
/* The total-variation distance between the shares of [a, b] and [b, c]; 0 where
 * either side has under MIN_HITS hits. */
double moved(const snap &a, const snap &b, const snap &c) {
    double before[GA_HOOK_TARGETS], recent[GA_HOOK_TARGETS];
    double nb = diff(a, b, before), nr = diff(b, c, recent);
    if (nb < MIN_HITS || nr < MIN_HITS) return 0;
    double tv = 0;
    for (uint32_t i = 0; i < c.n; i++) {
        double p = i < b.n ? before[i] / nb : 0, q = recent[i] / nr;
        tv += p > q ? p - q : q - p;
    }
    return tv * 0.5;
}

/* Where the mix changed: of the polls kept, MIN_BASE_NS after the period's start at
 * least, the one that splits the period into the most different sides (and CHANGED
 * apart at least). */
bool locate(struct ga_mix_change *c) {
    const snap &cur = g_ring[(g_n - 1) % RING];
    const snap *best = nullptr;
    double best_tv = CHANGED;
    for (uint32_t k = (g_n < RING ? g_n : RING) - 1; k >= 1; k--) {
        const snap &s = g_ring[(g_n - 1 - k) % RING];
        if (s.t < g_base.t + MIN_BASE_NS) continue;
        double tv = moved(g_base, s, cur);
        if (tv >= best_tv) best_tv = tv, best = &s;
    }
    if (!best) return false;
    c->since_ns = best->t, c->hits_since = 0;
    for (uint32_t i = 0; i < best->n; i++) c->hits_since += best->h[i];
    c->in_since = best->in, c->corr_since = best->corr;
    return true;
}
} // namespace

bool ga_mix_changed(struct ga_mix_change *c) noexcept {
    if (!ga_cfg.launch_counter || !ga_cfg.mix_cuts || !g_n) return false;
    const snap &cur = g_ring[(g_n - 1) % RING]; /* the last poll's (ga_mix_sample) */
    /* the recent side: from any poll kept RECENT_NS before this one or more, the
     * period's MIN_BASE_NS before it */
    for (uint32_t k = 1; k < g_n && k < RING; k++) {
        const snap &mid = g_ring[(g_n - 1 - k) % RING];
        if (mid.t < g_base.t + MIN_BASE_NS) break; /* and every older one */
        if (cur.t - mid.t >= RECENT_NS && moved(g_base, mid, cur) >= CHANGED)
            return locate(c); /* where it lies: the best split of all */
    }
    return false;
}

bool ga_mix_changed_lately(struct ga_mix_change *c) noexcept {
    if (!ga_cfg.launch_counter || !ga_cfg.mix_cuts || g_n < 2) return false;
    return locate(c);
}
