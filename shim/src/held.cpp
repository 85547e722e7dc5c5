/* held.cpp: kernel records on their way out. Each goes out in a batch (the
 * kernel_batch probe, with the drops counted since the last one), at once or,
 * in collection windows, once its period's weight is published: the published
 * weights (weights.cpp computes them) and the records waiting for them live here.
 * activity.cpp hands the records over; the poller releases the waiting ones. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ga_internal.h"
#include "ga_probes.h"

static thread_local uint64_t t_weight_rng = 0x2545f4914f6cdd1dULL; /* weight rounding */

/* ---- batches out ---- */
static std::atomic<uint64_t> g_pending_dropped; /* records CUPTI dropped, not yet said */

void ga_batch_dropped(uint64_t n) noexcept { g_pending_dropped.fetch_add(n, std::memory_order_relaxed); }

bool ga_batch_dropped_pending(void) noexcept { return g_pending_dropped.load(std::memory_order_relaxed) != 0; }

void ga_fire_batch(const struct ga_kernel_record *recs, uint32_t n) noexcept {
    uint64_t d = g_pending_dropped.exchange(0, std::memory_order_acq_rel);
    if (d > GA_MAX_BATCH_DROPS) { /* the rest goes with the next batches */
        g_pending_dropped.fetch_add(d - GA_MAX_BATCH_DROPS, std::memory_order_relaxed);
        d = GA_MAX_BATCH_DROPS;
    }
    ga_fire_kernel_batch(recs, n, (uint32_t)sizeof(struct ga_kernel_record), (uint32_t)d);
    ga_stat_batches.fetch_add(1, std::memory_order_relaxed);
    ga_stat_records.fetch_add(n, std::memory_order_relaxed);
}

/* Every launch before until_ns (CLOCK_MONOTONIC) has had its records fired
 * (final: all of them; the `published` probe). */
void ga_published(uint64_t until_ns, bool final) noexcept { ga_fire_published(until_ns, final ? 1u : 0u); }

/* ---- the published weights (weights.cpp publishes them) ----
 * Fixed point, x GA_WQ, per period number; a record's weight is rounded per record
 * without bias (round_weight). */
std::atomic<uint32_t> ga_period_seq;                /* the current period; 0: none */
static std::atomic<uint64_t> g_period_q[GA_QRING];  /* period << 32 | weight x GA_WQ */
static std::atomic<uint32_t> g_default_q{GA_WQ};    /* N x GA_WQ: the current period's N */
/* The span each period's records stand for, written before its weight. */
static std::atomic<uint64_t> g_span_start[GA_QRING], g_span_end[GA_QRING];

void ga_weight_set_default(uint32_t q) noexcept { g_default_q.store(q, std::memory_order_relaxed); }

void ga_weight_publish(uint32_t period, uint32_t q, uint64_t span_start, uint64_t span_end) noexcept {
    g_span_start[period % GA_QRING].store(span_start, std::memory_order_relaxed);
    g_span_end[period % GA_QRING].store(span_end, std::memory_order_relaxed);
    g_period_q[period % GA_QRING].store((uint64_t)period << 32 | q, std::memory_order_release);
}

/* The published span of `period` into r (0, 0 when it is not, or no longer, in
 * the ring: the agent places such a record where it arrives). */
static void set_span(struct ga_kernel_record *r, uint32_t period) {
    uint64_t v = g_period_q[period % GA_QRING].load(std::memory_order_acquire);
    r->span_start_ns = r->span_end_ns = 0;
    if (!period || (uint32_t)(v >> 32) != period) return;
    uint64_t s = g_span_start[period % GA_QRING].load(std::memory_order_relaxed);
    uint64_t e = g_span_end[period % GA_QRING].load(std::memory_order_relaxed);
    if (g_period_q[period % GA_QRING].load(std::memory_order_acquire) != v || e < s) return;
    r->span_start_ns = s, r->span_end_ns = e;
}

static uint32_t published_q(uint32_t period) {
    uint64_t v = g_period_q[period % GA_QRING].load(std::memory_order_acquire);
    return period && (uint32_t)(v >> 32) == period ? (uint32_t)v : 0;
}

uint32_t ga_weight_of(uint32_t period) noexcept {
    uint32_t cur = ga_period_seq.load(std::memory_order_relaxed);
    /* A period long gone (a stale correlation-id entry) would wait forever: it
     * takes the last published weight (cur - 1's is usually still pending; N if
     * none). */
    if (cur - period >= GA_QRING / 2) {
        uint32_t q = published_q(cur - 1);
        if (!q) q = published_q(cur - 2);
        return q ? q : g_default_q.load(std::memory_order_relaxed);
    }
    return published_q(period);
}

/* Integer record weight from a fixed-point one, rounded up with probability equal
 * to the fraction: unbiased, and ga_kernel_record.weight stays an integer. */
static uint32_t round_weight(uint32_t weight_q, uint64_t *rng) {
    uint32_t w = weight_q / GA_WQ, frac = weight_q % GA_WQ;
    if (frac && (uint32_t)(ga_splitmix64(rng) % GA_WQ) < frac) w++;
    return w;
}

/* Launches whose records are left out (weights.cpp: graph replays CUPTI mis-times). */
#define LEFT_OUT_TAB 8192u
static std::atomic<uint32_t> g_left_out[LEFT_OUT_TAB]; /* correlation ids, direct-mapped */

static void leave_out(uint32_t correlation_id) {
    g_left_out[correlation_id & (LEFT_OUT_TAB - 1)].store(correlation_id, std::memory_order_relaxed);
}

static bool left_out(uint32_t correlation_id) {
    return correlation_id &&
           g_left_out[correlation_id & (LEFT_OUT_TAB - 1)].load(std::memory_order_relaxed) == correlation_id;
}

/* Records of a window's launches before the mix changed in it (window.cpp's split):
 * their period's weight stands for the launches after the change only. Per period,
 * period << 32 | the last such launch's correlation id (CUPTI's ids grow). */
static std::atomic<uint64_t> g_period_drop[GA_QRING];

void ga_weight_drop_through(uint32_t period, uint32_t corr) noexcept {
    g_period_drop[period % GA_QRING].store((uint64_t)period << 32 | corr, std::memory_order_relaxed);
}

static bool dropped(uint32_t period, uint32_t correlation_id) {
    uint64_t v = g_period_drop[period % GA_QRING].load(std::memory_order_relaxed);
    return period && (uint32_t)(v >> 32) == period && correlation_id <= (uint32_t)v;
}

/* ---- records held for their period's weight (collection windows) ----
 * window.cpp weighs a record by its launch's period's counts, known only when
 * that period ends. A record whose weight is known goes at once; the others
 * wait here (copied out of the CUPTI buffer, which goes back to the pool at
 * once), each with its launch's period number in a parallel array (its .weight
 * is set when it is weighed), until the poller releases them. A
 * period's window holds a few thousand records (2-6 k on an H200); past
 * HELD_MAX the held records go at the last weight, counted. */
#define HELD_MAX (1u << 17) /* 8 MiB of records */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ga_kernel_record *held;
static uint32_t *held_period; /* held[i]'s launch's period (window.cpp) */
static uint32_t held_n, held_cap;
static uint32_t held_last_q; /* the last known weight, for overflow */
std::atomic<uint64_t> ga_stat_held_overflow;

/* Weighs the records whose period's weight is known (or all, at fallback_q),
 * moves them to the front, and returns how many; the rest keep their period.
 * Records of launches left out of their window (window.cpp: CUPTI mis-times
 * them) are dropped here and counted; *n shrinks by their number. */
static uint32_t weigh_known(struct ga_kernel_record *recs, uint32_t *periods, uint32_t *n, bool all,
                            uint32_t fallback_q) {
    if (!fallback_q) fallback_q = g_default_q.load(std::memory_order_relaxed);
    uint32_t k = 0, i = 0, m = *n;
    while (i < m) { /* [0,k) weighed, [k,i) waiting, [i,m) not looked at */
        uint32_t q = ga_weight_of(periods[i]);
        if (!q && !all) {
            i++;
            continue;
        }
        if (GA_UNLIKELY(left_out(recs[i].correlation_id) || dropped(periods[i], recs[i].correlation_id))) {
            ga_stat_left_out_records.fetch_add(1, std::memory_order_relaxed);
            --m;
            recs[i] = recs[m], periods[i] = periods[m];
            continue;
        }
        struct ga_kernel_record r = recs[i];
        uint32_t period = periods[i];
        r.weight = round_weight(q ? q : fallback_q, &t_weight_rng);
        set_span(&r, period);
        recs[i] = recs[k], periods[i] = periods[k];
        recs[k] = r, periods[k] = period;
        i++, k++;
    }
    *n = m;
    return k;
}

static void fire_all(struct ga_kernel_record *recs, uint32_t n) {
    for (uint32_t i = 0; i < n; i += GA_BATCH_MAX)
        ga_fire_batch(recs + i, n - i < GA_BATCH_MAX ? n - i : GA_BATCH_MAX);
}

/* Append (held_mu held). When full, the held records go at the last weight. */
static void hold(const struct ga_kernel_record *recs, const uint32_t *periods, uint32_t n) {
    if (held_n + n > held_cap && held_cap < HELD_MAX) {
        uint32_t cap = held_cap ? held_cap : 4096;
        while (cap < held_n + n && cap < HELD_MAX) cap *= 2;
        if (cap > HELD_MAX) cap = HELD_MAX;
        void *p = realloc(held, (size_t)cap * sizeof *held);
        if (p) held = (struct ga_kernel_record *)p;
        void *q = p ? realloc(held_period, (size_t)cap * sizeof *held_period) : nullptr;
        if (q) held_period = (uint32_t *)q, held_cap = cap;
    }
    if (held_n + n > held_cap) {
        ga_stat_held_overflow.fetch_add(held_n, std::memory_order_relaxed);
        fire_all(held, weigh_known(held, held_period, &held_n, true, held_last_q));
        held_n = 0;
        if (n > held_cap) { /* no memory at all: these go too */
            struct ga_kernel_record tmp[GA_BATCH_MAX];
            uint32_t tmp_period[GA_BATCH_MAX];
            for (uint32_t i = 0; i < n; i += GA_BATCH_MAX) {
                uint32_t m = n - i < GA_BATCH_MAX ? n - i : GA_BATCH_MAX;
                memcpy(tmp, recs + i, m * sizeof *recs);
                memcpy(tmp_period, periods + i, m * sizeof *periods);
                ga_stat_held_overflow.fetch_add(m, std::memory_order_relaxed);
                fire_all(tmp, weigh_known(tmp, tmp_period, &m, true, held_last_q));
            }
            return;
        }
    }
    memcpy(held + held_n, recs, (size_t)n * sizeof *recs);
    memcpy(held_period + held_n, periods, (size_t)n * sizeof *periods);
    held_n += n;
}

void ga_activity_fire_held(bool all, uint32_t fallback_q) noexcept {
    pthread_mutex_lock(&held_mu);
    struct ga_kernel_record *recs = held;
    uint32_t *periods = held_period;
    uint32_t n = held_n;
    held = nullptr, held_period = nullptr, held_n = held_cap = 0;
    if (fallback_q) held_last_q = fallback_q;
    pthread_mutex_unlock(&held_mu);
    if (n) {
        uint32_t k = weigh_known(recs, periods, &n, all, fallback_q);
        if (k < n) { /* periods not yet ended: back to wait */
            pthread_mutex_lock(&held_mu);
            hold(recs + k, periods + k, n - k);
            pthread_mutex_unlock(&held_mu);
        }
        /* Fired outside the lock: CUPTI's thread may complete a buffer meanwhile. */
        fire_all(recs, k);
    }
    free(recs);
    free(periods);
}

uint32_t ga_activity_newest_held(uint32_t period) noexcept {
    uint32_t newest = 0;
    pthread_mutex_lock(&held_mu);
    for (uint32_t i = 0; i < held_n; i++)
        if (held_period[i] == period && held[i].correlation_id > newest) newest = held[i].correlation_id;
    pthread_mutex_unlock(&held_mu);
    return newest;
}

/* Graph replays CUPTI mis-times (window.cpp): among the held records of
 * `period`, the newest record (largest correlation id) of each graph node is
 * its window's last traced replay of that node, left out. Poller thread. */
uint64_t ga_activity_leave_out_last_replays(uint32_t period, uint32_t *newest) noexcept {
    *newest = 0;
    pthread_mutex_lock(&held_mu);
    uint32_t m = 0;
    for (uint32_t i = 0; i < held_n; i++)
        m += held_period[i] == period && (held[i].flags & GA_REC_GRAPH) && held[i].graph_node_id;
    uint32_t cap = 16;
    while (cap < 2 * m) cap *= 2;
    struct node_last { uint64_t node; uint32_t corr; };
    node_last *tab = m ? (node_last *)calloc(cap, sizeof *tab) : nullptr;
    for (uint32_t i = 0; tab && i < held_n; i++) {
        const struct ga_kernel_record *r = &held[i];
        if (held_period[i] != period || !(r->flags & GA_REC_GRAPH) || !r->graph_node_id) continue;
        uint32_t j = (uint32_t)(ga_mix64(r->graph_node_id) & (cap - 1));
        while (tab[j].node && tab[j].node != r->graph_node_id) j = (j + 1) & (cap - 1);
        tab[j].node = r->graph_node_id;
        if (r->correlation_id > tab[j].corr) tab[j].corr = r->correlation_id;
    }
    pthread_mutex_unlock(&held_mu);
    if (m && !tab) return 0; /* no memory: nothing left out (the agent's checks remain) */
    uint64_t launches = 0;
    for (uint32_t j = 0; tab && j < cap; j++) {
        if (!tab[j].node || left_out(tab[j].corr)) continue;
        leave_out(tab[j].corr);
        launches++;
        if (tab[j].corr > *newest) *newest = tab[j].corr;
    }
    free(tab);
    return launches;
}

/* Fires converted records now (continuous, or their period's weight is known)
 * or holds them; true if any were fired. In windows periods[i] is recs[i]'s. */
bool ga_activity_emit(struct ga_kernel_record *recs, uint32_t *periods, uint32_t n, bool windows) noexcept {
    if (!windows) {
        ga_fire_batch(recs, n);
        return true;
    }
    uint32_t k = weigh_known(recs, periods, &n, false, 0);
    if (k < n) {
        pthread_mutex_lock(&held_mu);
        hold(recs + k, periods + k, n - k);
        pthread_mutex_unlock(&held_mu);
    }
    if (k) ga_fire_batch(recs, k);
    return k != 0;
}

void ga_held_atfork_child(void) noexcept { pthread_mutex_init(&held_mu, nullptr); }
