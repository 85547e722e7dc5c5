/* kernel_batch.h: the kernel_batch probe: each record checked, added to this
 * generation's totals, joined to its sampled launch's stack (corr_stacks) and graph
 * node (node_stacks); the batch's CUPTI-lost records within the process's budget;
 * a traced process's records tail-called to timeline.h. */
#ifndef GA_BPF_KERNEL_BATCH_H
#define GA_BPF_KERNEL_BATCH_H

#include "maps.h"
#include "aggregate.h"

/* ---- kernel_batch(const struct ga_kernel_record *recs, u32 count,
 *                   u32 record_size, u32 dropped) ---- */
static __always_inline int batch_one(u32 i, struct batch_ctx *bc)
{
    struct ga_kernel_record r;
    if (bpf_probe_read_user(&r, sizeof(r), (const void *)(bc->recs + (u64)i * sizeof(r))) != 0) {
        count(GA_DROP_RECORD_READ, 1);
        return 0;
    }
    if (r.kernel_id == 0) {
        count(GA_DROP_BAD_RECORD, 1);
        return 0;
    }
    u64 ns = r.end_ns - r.start_ns;
    if (r.end_ns < r.start_ns || ns > GA_MAX_KERNEL_NS || (r.flags & GA_REC_IMPOSSIBLE) ||
        r.weight > GA_MAX_RECORD_WEIGHT) {
        count(GA_DROP_IMPOSSIBLE, 1);
        return 0;
    }
    struct ga_agg_key k = {};
    k.tgid = bc->tgid;
    k.device_id = r.device_id;
    k.stream_id = r.stream_id;
    k.graph_id = r.graph_id;
    k.kernel_id = r.kernel_id;
    k.stack_id = 0;
    k.capture_stack_id = 0;
    k.graph_flags = 0;
    k.start = bc->start;
    /* The time its weight stands for: rows of different periods stay apart, and
     * the agent spreads each over its intervals. An impossible span (end before
     * start) is placed where it arrives, as one without a span. */
    u64 span_ok = r.span_end_ns >= r.span_start_ns;
    k.span_start_ns = r.span_start_ns & -span_ok;
    k.span_end_ns = r.span_end_ns & -span_ok;
    /* A graph kernel: the stack that created its node, if it was seen.
     * Branch-free (like log2_u64): the loop body's branches multiply the
     * states the verifier walks. A miss (or no node: id 0 is never stored)
     * leaves cap 0: the helper zeroes it, and stack ids are never 0. */
    struct ga_node_key nk = {.tgid = bc->tgid, .start = bc->start, .node_id = r.graph_node_id};
    u64 cap = 0;
    bpf_probe_read_kernel(&cap, sizeof(cap), node_stacks.lookup(&nk));
    u64 has_node = (r.graph_node_id | -r.graph_node_id) >> 63;
    u64 found = ((cap | -cap) >> 63) & has_node;
    k.capture_stack_id = cap & -found;
    /* found: GA_AGG_CAPTURED (1); a node never seen: GA_AGG_NODE_UNKNOWN (2). */
    k.graph_flags = (u32)(has_node * (GA_AGG_NODE_UNKNOWN - found));
    /* The record's window weight; 0 (an older shim) counts as 1, branch-free. */
    u64 rw = (u64)r.weight + (r.weight == 0);
    if (agg_add(bc->totals, &k, ns, rw) != 0)
        return 0;
    count(GA_CNT_KERNELS, 1);
    /* 1 if captured, 2 if unknown: each counter gets its own share. */
    count(GA_CNT_GRAPH_ATTRIBUTED, k.graph_flags & GA_AGG_CAPTURED);
    count(GA_CNT_GRAPH_NODE_UNKNOWN, k.graph_flags >> 1);

    struct ga_corr_key ck = {.tgid = bc->tgid, .correlation_id = r.correlation_id,
                             .start = bc->start, .pad = 0};
    struct ga_corr_val *cv = corr_stacks.lookup(&ck);
    if (!cv) {
        count(GA_CNT_UNSAMPLED, 1);
        return 0;
    }
    u64 launch_ns = cv->launch_ns;
    /* A sample from an earlier collection window with a reused correlation id
     * (see ga_kernel_record.join_max_lag_us) must not claim this record. */
    if (r.join_max_lag_us && launch_ns &&
        (r.start_ns < launch_ns || r.start_ns - launch_ns > (u64)r.join_max_lag_us * 1000)) {
        count(GA_CNT_STALE_JOIN, 1);
        return 0;
    }
    k.stack_id = cv->stack_id;
    agg_add(bc->sampled, &k, ns, cv->weight);
    latency_one(bc, &r, launch_ns);
    return 0;
}

/* Records this process lost (CUPTI had no buffer), counted node-wide by the
 * caller, are added to the process's own totals under GA_KERNEL_DROPPED, as launches without GPU
 * time, each standing for as many launches as the batch's first record (the
 * window weight of the time of the loss). */
static __always_inline void add_dropped(struct batch_ctx *bc, u32 dropped)
{
    u32 w = 0;
    if (bc->count)
        bpf_probe_read_user(&w, sizeof(w), (const void *)(bc->recs +
                            __builtin_offsetof(struct ga_kernel_record, weight)));
    if (w == 0 || w > GA_MAX_RECORD_WEIGHT)
        w = 1;
    struct ga_agg_key k = {};
    k.tgid = bc->tgid;
    k.start = bc->start;
    k.kernel_id = GA_KERNEL_DROPPED;
    struct ga_agg_val zero = {};
    struct ga_agg_val *v = agg_slot(bc->totals, &k, &zero);
    if (!v)
        return;
    __sync_fetch_and_add(&v->launches, dropped);
    __sync_fetch_and_add(&v->weighted_launches, (u64)dropped * w);
}

static __always_inline int within_drop_budget(u32 tgid, u32 dropped)
{
    u64 sec = bpf_ktime_get_ns() / 1000000000ull;
    struct ga_drop_budget zero = {};
    struct ga_drop_budget *b = drop_budget.lookup_or_try_init(&tgid, &zero);
    if (!b)
        return 1; /* table full: the per-batch bound still holds */
    if (b->second != sec) {
        b->second = sec;
        b->dropped = 0;
    }
    if (b->dropped + dropped > GA_MAX_BATCH_DROPS)
        return 0;
    __sync_fetch_and_add(&b->dropped, dropped);
    return 1;
}

/* A batch's count of records CUPTI lost, as counted: 0 when refused (a count no
 * shim sends, or past its process's budget): one GA_DROP_IMPLAUSIBLE for the node,
 * the count claimed for the process (drop_implausible). */
static __always_inline u32 accept_drops(u32 tgid, u32 dropped)
{
    if (!dropped)
        return 0;
    if (dropped > GA_MAX_BATCH_DROPS || !within_drop_budget(tgid, dropped)) {
        count(GA_DROP_IMPLAUSIBLE, 1);
        u64 zero = 0;
        u64 *claimed = drop_implausible.lookup_or_try_init(&tgid, &zero);
        if (claimed)
            __sync_fetch_and_add(claimed, dropped);
        return 0;
    }
    count(GA_DROP_CUPTI, dropped);
    return dropped;
}

/* Records [from, from + GA_BATCH_CHUNK) of the batch, those below its count. */
static __always_inline void batch_chunk(struct batch_ctx *bc, u32 from)
{
#pragma clang loop unroll(disable)
    for (u32 j = 0; j < GA_BATCH_CHUNK; j++) {
        u32 i = from + j;
        if (i >= bc->count)
            break;
        batch_one(i, bc);
    }
}

/* The rest of a batch from cur->next: the next program, or its end. The end adds
 * the accepted losses and, for a traced process, calls the events' program
 * (timeline.h). cur is the program's own copy: each program stores it before the
 * call that hands on. */
static __always_inline void batch_continue(struct pt_regs *ctx, struct batch_ctx *bc, struct batch_progress *cur,
                                           u64 key)
{
    if (cur->next < cur->count) {
        if (batch_store(key, cur) == 0)
            batch_prog.call(ctx, GA_BATCH_PROG_MORE); /* does not return when it is there */
        count(GA_DROP_BATCH_CHAIN, cur->count - cur->next);
    }
    if (cur->dropped)
        add_dropped(bc, cur->dropped);
    u32 zero = 0;
    u32 *tm = trace_mode.lookup(&zero);
    if (tm && (*tm == 1 || (*tm == 2 && traced.lookup(&cur->tgid)))) {
        if (cur->dropped) {
            u64 none = 0;
            u64 *lost = trace_drops.lookup_or_try_init(&cur->tgid, &none);
            if (lost)
                __sync_fetch_and_add(lost, cur->dropped);
        }
        cur->next = 0;
        if (batch_store(key, cur) == 0)
            batch_prog.call(ctx, GA_BATCH_PROG_TRACE);
        count(GA_DROP_TRACE_FULL, cur->count); /* no trace program: the events are lost */
    }
}

int ga_kernel_batch(struct pt_regs *ctx)
{
    u64 key = bpf_get_current_pid_tgid();
    u32 tgid = key >> 32;
    u64 records = 0;
    u32 nrecords = 0, record_size = 0, dropped = 0;

    bpf_usdt_readarg(1, ctx, &records);
    bpf_usdt_readarg(2, ctx, &nrecords);
    bpf_usdt_readarg(3, ctx, &record_size);
    bpf_usdt_readarg(4, ctx, &dropped);
    count(GA_CNT_BATCHES, 1);
    u32 start = see_proc(tgid);
    if (record_size != sizeof(struct ga_kernel_record) || nrecords > GA_BATCH_MAX) {
        count(GA_DROP_BAD_RECORD, 1);
        accept_drops(tgid, dropped); /* CUPTI's losses still count */
        return 0;
    }
    u32 gen = current_gen();
    struct batch_ctx bc = {.recs = records, .tgid = tgid, .count = nrecords, .start = start,
                           .trace = 0};
    if (batch_maps(&bc, gen) != 0) {
        /* The agent fills agg_maps/lat_maps before it attaches anything. */
        count(GA_DROP_AGG_FULL, nrecords);
        accept_drops(tgid, dropped);
        return 0;
    }
    /* The records go in ga_kernel_batch_more, a chunk a program: a bounded loop, not
     * bpf_loop(), since bcc 0.26 does not relocate BPF-to-BPF function references
     * (bpf_loop's callback arrives as NULL and the verifier rejects it: "R2
     * type=scalar expected=func"), and the verifier walks every iteration of one.
     * The losses are decided here, before the loop, in a program without it. */
    struct batch_progress cur = {.recs = records, .tgid = tgid, .count = nrecords, .start = start,
                                 .gen = gen, .next = 0, .dropped = accept_drops(tgid, dropped)};
    batch_continue(ctx, &bc, &cur, key);
    return 0;
}

/* A batch's next chunk (batch_prog[0]), tail-called by the program before it
 * (kernel_batch first). */
int ga_kernel_batch_more(struct pt_regs *ctx)
{
    u64 key = bpf_get_current_pid_tgid();
    struct batch_progress cur = {};
    if (!batch_resume(key, &cur)) {
        /* Its entry gone between two programs (evicted by a flood of new threads'
         * batches): how many records went with it is not known here. */
        count(GA_DROP_BATCH_CHAIN, 1);
        return 0;
    }
    struct batch_ctx bc = {.recs = cur.recs, .tgid = cur.tgid, .count = cur.count, .start = cur.start,
                           .trace = 0};
    if (batch_maps(&bc, cur.gen) != 0) {
        count(GA_DROP_AGG_FULL, cur.count - cur.next);
        return 0;
    }
    u32 from = cur.next;
    if (from > GA_BATCH_MAX) /* bounds for the verifier: no chain stores more */
        from = GA_BATCH_MAX;
    batch_chunk(&bc, from);
    cur.next = from + GA_BATCH_CHUNK;
    batch_continue(ctx, &bc, &cur, key);
    return 0;
}

#endif /* GA_BPF_KERNEL_BATCH_H */
