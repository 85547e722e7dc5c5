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
 * counter (launch_hook.cpp) where it is calibrated (its ratio to the launches is the
 * period's, so its shares are theirs) or waits for its first calibration (then only
 * where its hits in the span are at least half the span's launches). Where it counted
 * more slots inside the span, each piece between two growths goes by its hits scaled
 * to the last piece's coverage (below). Else (the clocks) the span's pieces give its
 * shape where launches carried from before the period begin it (ga_published_span),
 * and otherwise none goes: the agent spreads the span by time.
 * Poller thread only, and at a detach or exit (the poller stopped). */
#include <math.h>
#include <string.h>

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

/* The counter's growths (a scan that counted more slots: ga_shape_grew): when, the
 * functions that gained slots, and each function's hits then. The hits of a span's
 * piece before a growth are of a smaller coverage than those after it: an H200
 * Llama's first generate grew cuBLAS's slots three times in one 2.4 s period, whose
 * launches, spread by time, put its first judged interval +70 to +111 % off (its
 * launches ramped up through that period). The functions that kept their slots tell
 * by how much, as they scale window.cpp's waiting stretches (take_waits). */
struct growth {
    uint64_t t, mask;
    uint64_t each[GA_HOOK_TARGETS];
};
constexpr uint32_t GROWTHS = 16;
growth g_growths[GROWTHS];
uint32_t g_ng; /* growths noted */

const sample &nth(uint32_t i) { return g_ring[i % RING]; }

/* The last sample at or before t (strict: before t); false if none is kept. */
bool last_sample(uint64_t t, bool strict, uint32_t *k) {
    uint32_t lo = g_n > RING ? g_n - RING : 0, hi = g_n;
    if (hi == lo || nth(lo).t > t || (strict && nth(lo).t == t)) return false;
    while (hi - lo > 1) { /* nth(lo) qualifies */
        uint32_t mid = lo + (hi - lo) / 2;
        if (nth(mid).t < t || (!strict && nth(mid).t == t)) lo = mid;
        else hi = mid;
    }
    *k = lo;
    return true;
}

/* The count at t, interpolated between the samples around it: false if t is
 * outside them. */
bool count_at(uint64_t t, bool hits, double *v) {
    uint32_t k;
    if (g_n < 2 || !last_sample(t, false, &k) || t > nth(g_n - 1).t) return false;
    const sample &a = nth(k);
    double va = (double)(hits ? a.hits : a.seq);
    if (k + 1 == g_n || t == a.t) {
        *v = va;
        return true;
    }
    const sample &b = nth(k + 1);
    *v = va + ((double)(hits ? b.hits : b.seq) - va) * (double)(t - a.t) / (double)(b.t - a.t);
    return true;
}

/* The callbacks' count's share at t of [t0, t1] (false: no shape there). */
bool measured_seq(uint64_t t0, uint64_t t1, double *a0, double *a1) {
    return count_at(t0, false, a0) && count_at(t1, false, a1) && *a1 - *a0 >= 1;
}

/* A span's launches by the counter's hits: its pieces between the growths inside it,
 * each piece's hits times its scale (1 for the last: the coverage since the last
 * growth; before, all hits over those of the functions no later growth gave slots
 * to, in the stretch from the last growth to the next one or now). */
struct hit_pieces {
    uint32_t n;                      /* pieces */
    uint64_t edge[GROWTHS + 2];      /* piece i is [edge[i], edge[i + 1]] */
    double v[GROWTHS + 2];           /* the hits at each edge */
    double base[GROWTHS + 2], scale[GROWTHS + 1];
    double raw;                      /* the span's hits, unscaled */
};

bool coverage_stood(uint64_t from, uint64_t to) { /* no scan counted more slots in (from, to) */
    uint32_t a, b;
    return last_sample(from, false, &a) && last_sample(to, true, &b) && nth(a).epoch == nth(b).epoch;
}

bool pieces_of(uint64_t t0, uint64_t t1, hit_pieces *p) {
    uint32_t lo = g_ng > GROWTHS ? g_ng - GROWTHS : 0, in[GROWTHS], m = 0, after = g_ng;
    if (lo && g_growths[lo % GROWTHS].t > t0) return false; /* growths inside it were forgotten */
    for (uint32_t i = lo; i < g_ng; i++) {
        uint64_t t = g_growths[i % GROWTHS].t;
        if (t > t0 && t < t1) in[m++] = i;
        else if (t >= t1 && after == g_ng) after = i;
    }
    p->n = m + 1, p->edge[0] = t0, p->edge[m + 1] = t1;
    for (uint32_t i = 0; i < m; i++) p->edge[i + 1] = g_growths[in[i] % GROWTHS].t;
    uint64_t ref[GA_HOOK_TARGETS] = {0};
    if (m) {
        if (after < g_ng) memcpy(ref, g_growths[after % GROWTHS].each, sizeof ref);
        else ga_hook_hits_each(ref, GA_HOOK_TARGETS);
    }
    p->base[0] = p->raw = 0;
    for (uint32_t i = 0; i <= m; i++) {
        if (!coverage_stood(p->edge[i], p->edge[i + 1])) return false; /* a growth not noted */
        uint64_t mask = 0;
        for (uint32_t j = i; j < m; j++) mask |= g_growths[in[j] % GROWTHS].mask;
        double all = 0, kept = 0;
        if (mask) {
            ga_hook_split(ref, g_growths[in[m - 1] % GROWTHS].each, mask, &all, &kept);
            if (kept < GA_HOOK_MIN_HITS) return false;
        }
        p->scale[i] = mask ? all / kept : 1;
        if (!count_at(p->edge[i], true, &p->v[i]) || !count_at(p->edge[i + 1], true, &p->v[i + 1])) return false;
        double h = p->v[i + 1] - p->v[i];
        p->raw += h, p->base[i + 1] = p->base[i] + p->scale[i] * (h > 0 ? h : 0);
    }
    return p->base[m + 1] >= 1;
}

/* The span's launches by its pieces' hits before t (NaN: t outside the samples). */
double hits_before(const hit_pieces &p, uint64_t t) {
    uint32_t i = 0;
    while (i + 1 < p.n && t >= p.edge[i + 1]) i++;
    double v;
    if (!count_at(t, true, &v)) return NAN;
    return p.base[i] + p.scale[i] * (v - p.v[i] > 0 ? v - p.v[i] : 0);
}
} // namespace

void ga_shape_sample(uint64_t now_ns) noexcept {
    if (g_n && nth(g_n - 1).t >= now_ns) return;
    g_ring[g_n % RING] = {now_ns, ga_launch_seq.load(std::memory_order_relaxed), ga_hook_hits(), ga_hook_epoch()};
    g_n++;
}

void ga_shape_grew(uint64_t now_ns, uint64_t targets) noexcept {
    growth &g = g_growths[g_ng++ % GROWTHS];
    g.t = now_ns, g.mask = targets;
    memset(g.each, 0, sizeof g.each);
    ga_hook_hits_each(g.each, GA_HOOK_TARGETS);
}

void ga_shape_reset(uint64_t now_ns) noexcept {
    g_n = g_ng = 0, g_measure = GA_SHAPE_NONE;
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

namespace {
/* The count's launches in [t0, t1] and before t in it, as one of the ways above:
 * false where it has no shape there. */
struct counted_span {
    bool seq;
    double a0, a1;
    hit_pieces p;
    bool of(uint64_t t0, uint64_t t1, int measure, double launches) {
        seq = measure == GA_SHAPE_SEQ;
        if (seq) return measured_seq(t0, t1, &a0, &a1);
        if (measure != GA_SHAPE_HITS && measure != GA_SHAPE_HITS_WAITING) return false;
        if (!pieces_of(t0, t1, &p)) return false;
        /* before a calibration, the hits stand for the launches only where they are
         * most of them (a job launching through paths the counter does not see) */
        return measure == GA_SHAPE_HITS || p.raw >= 0.5 * launches;
    }
    double share(uint64_t t) const { /* of [t0, t1]'s, before t */
        if (seq) {
            double v;
            return count_at(t, false, &v) ? (v - a0) / (a1 - a0) : NAN;
        }
        return hits_before(p, t) / p.base[p.n];
    }
};
} // namespace

void ga_shape_publish(const ga_published_span &sp) noexcept {
    uint64_t start_ns = sp.start, end_ns = sp.end;
    if (ga_cfg.duty_cycle <= 1 || end_ns <= start_ns) return;
    bool have = g_measure != GA_SHAPE_NONE;
    if (have) ga_shape_sample(ga_now_ns()); /* a detach's or an exit's span ends now */
    counted_span whole;
    if (have && whole.of(start_ns, end_ns, g_measure, (double)sp.all)) { /* the count's own shape */
        fire_shape(start_ns, end_ns, [&](uint64_t t) { return whole.share(t); });
        return;
    }
    /* No shape of the whole span (the clocks), but its pieces' launches are known: the
     * ones carried from before the period over their stretch, the period's own over
     * its (by the count where it has a shape there), the ones joined after it over
     * theirs. A torch.compile period on an H200 whose span began with the compile's
     * few launches 1.6 s before the loop put 18 586 of the loop's launches in the
     * interval before it started, spread by time. */
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
    counted_span mine;
    bool own_shape = have && sp.own_end > sp.own_start && mine.of(sp.own_start, sp.own_end, g_measure, own);
    fire_shape(start_ns, end_ns, [&](uint64_t t) {
        double n = joined * (double)(t - start_ns) / span; /* launches in [start, t] */
        if (t < sp.own_start) {
            n += before * (double)(t - start_ns) / (double)(sp.own_start - start_ns);
        } else if (t < sp.own_end) {
            double g = (double)(t - sp.own_start) / (double)(sp.own_end - sp.own_start);
            if (own_shape) {
                double c = mine.share(t);
                if (c == c) g = c;
            }
            n += before + own * (g < 0 ? 0 : g > 1 ? 1 : g);
        } else {
            n += before + own + (all - before - own - joined) * (double)(t - sp.own_end) / (double)(end_ns - sp.own_end);
        }
        return n / all;
    });
}
