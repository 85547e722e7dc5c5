/* activity.cpp: CUPTI activity buffers -> kernel_batch probes.
 *
 * Buffers: a pool of GA_BUF_SIZE buffers, each followed by its own scratch
 * arrays of GA_BATCH_MAX ga_kernel_records and their periods, so a completed
 * buffer is converted without any shared state. The pool grows as the load needs, up to
 * GPU_AGENT_BUFFER_POOL_MB buffers (default 64: a launch flood on saturated
 * cores outran 16), and keeps what it grew. When it is exhausted the request
 * callback returns NULL; CUPTI then drops records and
 * counts them, and the count (cuptiActivityGetNumDroppedRecords) is reported
 * in the next kernel_batch's `dropped` argument.
 *
 * Kernel ids come from names.cpp (ga_kernel_id_for). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ga_probes.h"
#include "ga_internal.h"

#define GA_BUF_SIZE (1u << 20)
#define GA_SCRATCH_BYTES (GA_BATCH_MAX * (sizeof(struct ga_kernel_record) + sizeof(uint32_t)))

std::atomic<uint64_t> ga_stat_batches;
std::atomic<uint64_t> ga_stat_records;
std::atomic<uint64_t> ga_stat_dropped;
std::atomic<uint64_t> ga_stat_null_buffers;


/* ---- buffer pool ---- */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *pool_free[GA_BUF_MAX];
static unsigned pool_nfree, pool_nalloc;
/* Buffers CUPTI holds now: taken back after a finalize (ga_activity_take_back). */
static uint8_t *pool_out[GA_BUF_MAX];
static unsigned pool_nout;
static std::atomic<uint64_t> g_stat_taken_back;

static void out_remove(uint8_t *b) { /* pool_mu held */
    for (unsigned i = 0; i < pool_nout; i++)
        if (pool_out[i] == b) {
            pool_out[i] = pool_out[--pool_nout];
            return;
        }
}

void CUPTIAPI ga_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) noexcept {
    uint8_t *b = nullptr;
    pthread_mutex_lock(&pool_mu);
    if (pool_nfree) {
        b = pool_free[--pool_nfree];
    } else if (pool_nalloc < ga_cfg.buffer_pool_mb) {
        b = (uint8_t *)aligned_alloc(64, GA_BUF_SIZE + GA_SCRATCH_BYTES);
        if (b) pool_nalloc++;
    }
    if (b && pool_nout < GA_BUF_MAX) pool_out[pool_nout++] = b;
    pthread_mutex_unlock(&pool_mu);
    if (!b) ga_stat_null_buffers.fetch_add(1, std::memory_order_relaxed);
    *buffer = b;
    *size = b ? GA_BUF_SIZE : 0;
    *max_records = 0;
}

static void buffer_release(uint8_t *b) {
    pthread_mutex_lock(&pool_mu);
    out_remove(b);
    if (pool_nfree < GA_BUF_MAX) {
        pool_free[pool_nfree++] = b;
        b = nullptr;
    }
    pthread_mutex_unlock(&pool_mu);
    free(b); /* only if the buffer was somehow not ours to keep */
}

/* The newest kernel record of the CUPTI we build against: CUDA 13 (the default build)
 * has Kernel10, CUDA 12.x Kernel9 (the container image ships a shim built with each).
 * Every field read below is in both. */
#if CUPTI_API_VERSION >= 130000
typedef CUpti_ActivityKernel10 ga_activity_kernel_t;
#else
typedef CUpti_ActivityKernel9 ga_activity_kernel_t;
#endif

/* ---- kernels whose windowed records had no launch callback ----
 * A few slots, first come: enough to name the launch path a device misses
 * (on an H200: eager MLP's cuBLAS launches). */
#define UNSEEN_SLOTS 4
static std::atomic<uint64_t> unseen_id[UNSEEN_SLOTS], unseen_n[UNSEEN_SLOTS];
std::atomic<uint64_t> ga_stat_unseen;

static void note_unseen(uint64_t kernel_id) {
    ga_stat_unseen.fetch_add(1, std::memory_order_relaxed);
    for (unsigned i = 0; i < UNSEEN_SLOTS; i++) {
        uint64_t id = unseen_id[i].load(std::memory_order_relaxed);
        if (id == 0 && unseen_id[i].compare_exchange_strong(id, kernel_id, std::memory_order_relaxed))
            id = kernel_id;
        if (id == kernel_id) {
            unseen_n[i].fetch_add(1, std::memory_order_relaxed);
            return;
        }
    }
}

void ga_unseen_kernels(char *buf, size_t size) noexcept {
    size_t used = 0;
    buf[0] = 0;
    for (unsigned i = 0; i < UNSEEN_SLOTS && used + 1 < size; i++) {
        uint64_t n = unseen_n[i].load(std::memory_order_relaxed);
        if (!n) continue;
        const char *name = ga_name_of(unseen_id[i].load(std::memory_order_relaxed));
        int w = snprintf(buf + used, size - used, "%s%.60s (%llu)", used ? ", " : "",
                         name ? name : "?", (unsigned long long)n);
        if (w < 0) break;
        used += (size_t)w < size - used ? (size_t)w : size - used - 1;
    }
}

/* ---- completed buffers ---- */

static struct ga_kernel_record empty_batch[1];

static void read_dropped(CUcontext ctx, uint32_t stream_id) {
    if (!ga_cupti.ActivityGetNumDroppedRecords) return;
    size_t dropped = 0;
    if (ga_cupti.ActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS && dropped) {
        ga_batch_dropped(dropped);
        ga_stat_dropped.fetch_add(dropped, std::memory_order_relaxed);
    }
}

/* After a flush: records lost since the last completed buffer. When every buffer
 * was out as the last launches came, no completion callback is left to read
 * their count (a flood's final drops went unreported). */
/* After a cuptiFinalize, which frees everything CUPTI had: the buffers it never
 * handed back (the empty ones it held; on an H100, 1 002 teardowns of one process
 * drained a 64-buffer pool and lost 70 % of the window records) go back to the
 * pool. Called on the finalizing thread, before anything can subscribe again. */
void ga_activity_take_back(void) noexcept {
    pthread_mutex_lock(&pool_mu);
    unsigned n = pool_nout;
    while (pool_nout && pool_nfree < GA_BUF_MAX) pool_free[pool_nfree++] = pool_out[--pool_nout];
    pthread_mutex_unlock(&pool_mu);
    g_stat_taken_back.fetch_add(n, std::memory_order_relaxed);
}

uint64_t ga_activity_taken_back(void) noexcept { return g_stat_taken_back.load(std::memory_order_relaxed); }

void ga_report_drops(void) noexcept {
    read_dropped(nullptr, 0);
    if (ga_batch_dropped_pending()) ga_fire_batch(empty_batch, 0);
}

/* Records of launches outside windows: at their edges, or any while activity
 * stays on for PC sampling. */
static std::atomic<uint64_t> ga_stat_outside_windows;

static void buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                             size_t valid_size);

/* A teardown (teardown.cpp) waits for the buffer callbacks already running. */
void CUPTIAPI ga_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                  size_t valid_size) noexcept {
    ga_cupti_buffer_enter();
    pthread_mutex_lock(&pool_mu); /* the shim's from now: no take-back can reuse it */
    out_remove(buffer);
    pthread_mutex_unlock(&pool_mu);
    buffer_completed(ctx, stream_id, buffer, size, valid_size);
    ga_cupti_gate_leave();
}

static void buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                             size_t valid_size) {
    read_dropped(ctx, stream_id);
    bool fired = false;
    if (buffer && size >= GA_BUF_SIZE) {
        struct ga_kernel_record *out = (struct ga_kernel_record *)(buffer + GA_BUF_SIZE);
        uint32_t *periods = (uint32_t *)(out + GA_BATCH_MAX); /* out[i]'s launch's period */
        uint32_t n = 0;
        CUpti_Activity *rec = nullptr;
        bool audit = ga_audit_on();
        bool windows = ga_cfg.duty_cycle > 1; /* records wait for their period's weight */
        for (;;) {
            CUptiResult r = ga_cupti.ActivityGetNextRecord(buffer, valid_size, &rec);
            if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
            if (r != CUPTI_SUCCESS) {
                ga_report_cupti_error("cuptiActivityGetNextRecord", r);
                break;
            }
#ifdef GA_BENCH_BUILD
            if (GA_UNLIKELY(rec->kind == CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API)) {
                ga_stat_internal_launches.fetch_add(1, std::memory_order_relaxed); /* experiment */
                continue;
            }
#endif
            if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
                rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
                continue;
            const ga_activity_kernel_t *k = (const ga_activity_kernel_t *)rec;
            struct ga_kernel_record *o = &out[n];
            o->start_ns = k->start;
            o->end_ns = k->end;
            o->kernel_id = ga_kernel_id_for(k->name);
            o->graph_node_id = k->graphNodeId;
            o->correlation_id = k->correlationId;
            o->device_id = k->deviceId;
            o->context_id = k->contextId;
            o->stream_id = k->streamId;
            o->graph_id = k->graphId;
            o->flags = (k->graphId || k->graphNodeId) ? GA_REC_GRAPH : 0;
            o->grid_x = (uint32_t)k->gridX, o->grid_y = (uint32_t)k->gridY, o->grid_z = (uint32_t)k->gridZ;
            o->block_x = (uint32_t)k->blockX, o->block_y = (uint32_t)k->blockY, o->block_z = (uint32_t)k->blockZ;
            /* Continuous: each record is itself. In windows: its launch's
             * period's weight, once that period has ended (window.cpp), and only
             * launches of the window this kernel ran in may join it; without
             * CUPTI timestamps, half a window. */
            o->weight = 1;
            o->join_max_lag_us = 0;
            o->span_start_ns = o->span_end_ns = 0; /* windows: set when weighed (held.cpp) */
            if (GA_UNLIKELY(audit)) {
                /* The full trace is tallied (before anything below drops a record);
                 * only windowed launches go on. */
                bool in = ga_audit_in_window(k->correlationId);
                ga_audit_tally(o->kernel_id, k->end - k->start, in);
                if (!in) continue;
            }
            if (windows) {
                bool unseen = false, outside = false, late = false;
                uint32_t period = ga_window_period_of(k->correlationId, &unseen, &outside, &late); /* weighed in emit */
                periods[n] = period;
                /* a launch outside the windows: at a window's edge (kernel activity
                 * on, the window not open), or any, with activity held on for PC
                 * sampling. Not the window's: its period counted it already. */
                if (GA_UNLIKELY(unseen) && ((outside && !(o->flags & GA_REC_GRAPH)) ||
                                            ga_pcs_on.load(std::memory_order_relaxed))) {
                    ga_stat_outside_windows.fetch_add(1, std::memory_order_relaxed);
                    continue;
                }
                /* a launch in a window's tail (tail.cpp): counted there, not weighed */
                if (!(o->flags & GA_REC_GRAPH) && ga_tail_record(unseen, k->start)) continue;
                if (GA_UNLIKELY(unseen)) {
                    note_unseen(o->kernel_id);
                    if (late) ga_stat_late_records.fetch_add(1, std::memory_order_relaxed);
                    /* A graph replay traced but launched outside a window: made
                     * between a window's flag going off and its activity going
                     * off, it is that window's last traced replay, whose end
                     * times later replays overwrite (window.cpp). Dropped; it
                     * was never counted among the window's launches. */
                    if (o->flags & GA_REC_GRAPH) {
                        /* (or a replay in a window's tail, which no callback saw:
                         * CUPTI must not be torn down after it, collection.cpp) */
                        ga_graphs_made.store(1, std::memory_order_relaxed);
                        ga_stat_left_out_records.fetch_add(1, std::memory_order_relaxed);
                        continue;
                    }
                } else if (GA_UNLIKELY(o->flags & GA_REC_GRAPH) && ga_weight_of(period) &&
                           ga_window_late_last_replay(period, o->correlation_id)) {
                    /* Its period was weighed without it, and it is no older than
                     * the replays left out then: the window's real last one. */
                    ga_stat_left_out_late.fetch_add(1, std::memory_order_relaxed);
                    ga_stat_left_out_records.fetch_add(1, std::memory_order_relaxed);
                    continue;
                }
                o->join_max_lag_us = ga_cupti.GetTimestamp ? ga_window_join_max_lag_us(k->start)
                                                          : (uint32_t)(ga_window_period_ns() / ga_window_slots() / 2000u);
                if (GA_UNLIKELY(!unseen && ga_window_record_impossible(period, k->start, k->end)))
                    o->flags |= GA_REC_IMPOSSIBLE; /* BPF drops and counts it */
            }
            if (++n == GA_BATCH_MAX) {
                fired |= ga_activity_emit(out, periods, n, windows);
                n = 0;
            }
        }
        if (n) fired |= ga_activity_emit(out, periods, n, windows);
    }
    if (!fired && ga_batch_dropped_pending()) ga_fire_batch(empty_batch, 0);
    if (buffer) {
        if (size >= GA_BUF_SIZE) buffer_release(buffer);
        /* a buffer we did not hand out is not ours to free */
    }
}

void ga_activity_atfork_child(void) noexcept {
    pthread_mutex_init(&pool_mu, nullptr);
    ga_held_atfork_child();
    ga_names_atfork_child();
}

uint64_t ga_activity_stat(int which) noexcept {
    switch (which) {
    case GA_SC_NULL_BUFFERS: return ga_stat_null_buffers.load();
    case GA_SC_CUT_NAMES: return ga_stat_truncated_names.load(); /* names.cpp */
    case GA_SC_BUFFERS: return pool_nalloc;
    case GA_SC_OUTSIDE_WINDOWS: return ga_stat_outside_windows.load();
    }
    return 0;
}
