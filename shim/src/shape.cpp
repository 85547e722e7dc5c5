/* shape.cpp: how a published span's launches spread over it (the period_shape
 * probe, shim/include/gpu_agent_probes.h).
 *
 * Why: a span's weighted records stand for every launch in it, and the agent
 * splits them over its intervals (join/placement.py). Split by time alone, a
 * span whose launches did not go evenly lands in the wrong interval: Llama decode
 * on an H200 ran periods of 8-11 s against 10 s intervals, and its window and
 * count phase slowed the job in a part of each, so its intervals read a 90th
 * percentile of 6.5 % while whole periods were right. The shim knows how its
 * launches went: at every poll (GPU_AGENT_POLL_MS and every window edge) it notes
 * a cumulative count with the time, and when a span's weight is published it
 * sends the count's share at GA_SHAPE_KNOTS even steps of the span.
 *
 * The count is the one the period's estimate stands on: the launch callbacks where
 * they stay on between windows (no teardowns: they see every launch), the launch
 * counter where it is calibrated (launch_hook.cpp; its ratio to the launches is the
 * period's, so its shares are theirs, unless it counted more slots inside the span).
 * Else (the clocks) the span's pieces give its shape where launches carried from
 * before the period begin it (ga_published_span), and otherwise none goes: the agent
 * spreads the span by time.
 * Poller thread only, and at a detach or exit (the poller stopped). */
#include <math.h>

#include "ga_internal.h"
#include "ga_probes.h"
#include "launch_hook.h"

namespace {
struct sample {
    uint64_t t, seq, hits, epoch; /* epoch: the counter's coverage (ga_hook_epoch) */
};
/* 4096 polls: 6.8 minutes at one poll per 100 ms, and more than any span's length
 * (periods are at most 15 s; window-less ones join them for 64 periods at most) at
 * the edges' polls too. An older span goes without a shape. */
constexpr uint32_t RING = 4096;
sample g_ring[RING];
uint32_t g_n; /* samples taken */
int g_measure = GA_SHAPE_NONE; /* ga_shape_measure */

const sample &nth(uint32_t i) { return g_ring[i % RING]; }

/* The count at t, interpolated between the samples around it: false if t is
 * outside them. *epoch: the counter's coverage at the sample after t. */
bool count_at(uint64_t t, bool hits, double *v, uint64_t *epoch = nullptr) {
    uint32_t lo = g_n > RING ? g_n - RING : 0, hi = g_n;
    if (hi - lo < 2 || t < nth(lo).t || t > nth(hi - 1).t) return false;
    while (hi - lo > 1) { /* nth(lo).t <= t < nth(hi).t, or t is the last sample's */
        uint32_t mid = lo + (hi - lo) / 2;
        if (nth(mid).t <= t) lo = mid;
        else hi = mid;
    }
    const sample &a = nth(lo);
    double va = (double)(hits ? a.hits : a.seq);
    if (epoch) *epoch = hi == g_n ? a.epoch : nth(hi).epoch;
    if (hi == g_n || t == a.t) {
        *v = va;
        return true;
    }
    const sample &b = nth(hi);
    double vb = (double)(hits ? b.hits : b.seq);
    *v = va + (vb - va) * (double)(t - a.t) / (double)(b.t - a.t);
    return true;
}

/* The count's share at t of [t0, t1] (false: no shape there, or the counter counted
 * more slots inside it, when its hits are no shape of it). */
bool measured(uint64_t t0, uint64_t t1, bool hits, double *a0, double *a1) {
    uint64_t e0 = 0, e1 = 0;
    return count_at(t0, hits, a0, &e0) && count_at(t1, hits, a1, &e1) && *a1 - *a0 >= 1 && (!hits || e0 == e1);
}
} // namespace

void ga_shape_sample(uint64_t now_ns) noexcept {
    if (g_n && nth(g_n - 1).t >= now_ns) return;
    g_ring[g_n % RING] = {now_ns, ga_launch_seq.load(std::memory_order_relaxed), ga_hook_hits(), ga_hook_epoch()};
    g_n++;
}

void ga_shape_reset(uint64_t now_ns) noexcept {
    g_n = 0, g_measure = GA_SHAPE_NONE;
    ga_shape_sample(now_ns);
}

void ga_shape_measure(int measure) noexcept { g_measure = measure; }

/* The span's shape from share_at(t), the share of its launches before t (NaN: none
 * there, so no shape), at each knot; never falling, at most 1. */
template <class F> static void fire_shape(uint64_t start_ns, uint64_t end_ns, F share_at) {
    uint16_t shares[GA_SHAPE_KNOTS];
    double span = (double)(end_ns - start_ns), prev = 0;
    for (unsigned j = 0; j + 1 < GA_SHAPE_KNOTS; j++) {
        double f = share_at(start_ns + (uint64_t)(span * (double)(j + 1) / GA_SHAPE_KNOTS));
        if (f != f) return;
        prev = f < prev ? prev : f > 1 ? 1 : f;
        shares[j] = (uint16_t)(prev * GA_SHAPE_ONE + 0.5);
    }
    shares[GA_SHAPE_KNOTS - 1] = GA_SHAPE_ONE;
    ga_fire_period_shape(start_ns, end_ns, shares, GA_SHAPE_KNOTS);
}

void ga_shape_publish(const ga_published_span &sp) noexcept {
    uint64_t start_ns = sp.start, end_ns = sp.end;
    if (ga_cfg.duty_cycle <= 1 || end_ns <= start_ns) return;
    bool have = g_measure != GA_SHAPE_NONE, hits = g_measure == GA_SHAPE_HITS;
    if (have) ga_shape_sample(ga_now_ns()); /* a detach's or an exit's span ends now */
    double a0, a1;
    if (have && measured(start_ns, end_ns, hits, &a0, &a1)) { /* the count's own shape */
        fire_shape(start_ns, end_ns, [&](uint64_t t) {
            double v;
            return count_at(t, hits, &v) ? (v - a0) / (a1 - a0) : NAN;
        });
        return;
    }
    /* No shape of the whole span (the clocks, or a counter that grew in it), but its
     * pieces' launches are known: the ones carried from before the period over their
     * stretch, the period's own over its (by the count where it has a shape there),
     * the ones joined after it over theirs. A torch.compile period on an H200 whose
     * span began with the compile's few launches 1.6 s before the loop put 18 586 of
     * the loop's launches in the interval before it started, spread by time. */
    double all = (double)sp.all, before = (double)sp.before, own = (double)sp.own;
    if (sp.all < 1 || before + own > all || sp.own_start < start_ns || sp.own_end > end_ns || sp.own_end < sp.own_start)
        return;
    if (sp.own_start == start_ns) own += before, before = 0;
    /* Nothing carried from before the period: by time, the whole span. (Launches joined
     * with no stretch of their own, a waiting stretch's counted at a calibration
     * (window.cpp's take_waits), put at the span's end or with the period's own, put an
     * H200 Llama's first judged interval -2.37 % and +111 % off; by time, 4 intervals
     * read within 0.12 % the same day.) */
    if (before < 1) return;
    /* those joined with no stretch: where they were made is not known, so by time */
    double joined = sp.own_end == end_ns ? all - before - own : 0, span = (double)(end_ns - start_ns);
    double o0 = 0, o1 = 0;
    bool own_shape = have && sp.own_end > sp.own_start && measured(sp.own_start, sp.own_end, hits, &o0, &o1);
    fire_shape(start_ns, end_ns, [&](uint64_t t) {
        double n = joined * (double)(t - start_ns) / span, v; /* launches in [start, t] */
        if (t < sp.own_start) {
            n += before * (double)(t - start_ns) / (double)(sp.own_start - start_ns);
        } else if (t < sp.own_end) {
            double g = (double)(t - sp.own_start) / (double)(sp.own_end - sp.own_start);
            if (own_shape && count_at(t, hits, &v)) g = (v - o0) / (o1 - o0);
            n += before + own * (g < 0 ? 0 : g > 1 ? 1 : g);
        } else {
            n += before + own + (all - before - own - joined) * (double)(t - sp.own_end) / (double)(end_ns - sp.own_end);
        }
        return n / all;
    });
}
