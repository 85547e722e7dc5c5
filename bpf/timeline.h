/* timeline.h: timelines: the program kernel_batch
 * tail-calls to send a traced process's records as GA_EV_KERNEL events, and the
 * gpu_device probe (GA_EV_DEVICE). */
#ifndef GA_BPF_TIMELINE_H
#define GA_BPF_TIMELINE_H

#include "maps.h"
#include "aggregate.h"


/* One record of a traced process, with what batch_one would join to it, to the
 * agent: as few branches as possible (the verifier walks every iteration). The
 * agent checks the record, and refuses a stale join (join_max_lag_us), itself. */
static __always_inline u32 trace_rec(u32 i, struct batch_ctx *bc)
{
    struct ga_ev_kernel *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev)
        return 0;
    if (bpf_probe_read_user(&ev->rec, sizeof(ev->rec),
                            (const void *)(bc->recs + (u64)i * sizeof(ev->rec))) != 0) {
        events.ringbuf_discard(ev, 0);
        return 0;
    }
    ev->hdr.type = GA_EV_KERNEL;
    ev->hdr.tgid = bc->tgid;
    ev->start = bc->start;
    struct ga_node_key nk = {.tgid = bc->tgid, .start = bc->start, .node_id = ev->rec.graph_node_id};
    u64 cap = 0;
    bpf_probe_read_kernel(&cap, sizeof(cap), node_stacks.lookup(&nk)); /* a miss reads 0 */
    ev->capture_stack_id = cap & -(u64)(ev->rec.graph_node_id != 0);
    struct ga_corr_key ck = {.tgid = bc->tgid, .correlation_id = ev->rec.correlation_id,
                             .start = bc->start, .pad = 0};
    struct ga_corr_val cv = {};
    bpf_probe_read_kernel(&cv, sizeof(cv), corr_stacks.lookup(&ck)); /* a miss reads 0s */
    ev->launch_tid = cv.tid;
    ev->stack_id = cv.stack_id;
    ev->launch_ns = cv.launch_ns;
    events.ringbuf_submit(ev, 0);
    return 1;
}

/* A traced process's batch as events (batch_prog[1]), GA_BATCH_CHUNK records a
 * program, each calling the next, from where kernel_batch's chain left it
 * (batch_progress, next 0). */
int ga_kernel_batch_trace(struct pt_regs *ctx)
{
    u64 key = bpf_get_current_pid_tgid();
    struct batch_progress cur = {};
    if (!batch_resume(key, &cur)) {
        count(GA_DROP_TRACE_FULL, 1); /* its entry gone (ga_kernel_batch_more): at least one */
        return 0;
    }
    struct batch_ctx bc = {.recs = cur.recs, .tgid = cur.tgid, .count = cur.count,
                           .start = cur.start, .trace = 1};
    u32 from = cur.next, sent = 0;
    if (from > GA_BATCH_MAX) /* bounds for the verifier: no chain stores more */
        from = GA_BATCH_MAX;
#pragma clang loop unroll(disable)
    for (u32 j = 0; j < GA_BATCH_CHUNK; j++) {
        u32 i = from + j;
        if (i >= cur.count)
            break;
        sent += trace_rec(i, &bc);
    }
    u32 end = from + GA_BATCH_CHUNK < cur.count ? from + GA_BATCH_CHUNK : cur.count;
    count(GA_CNT_TRACE_EVENTS, sent);
    count(GA_DROP_TRACE_FULL, end - from - sent); /* the ring buffer was full (or a record unreadable) */
    if (end < cur.count) {
        cur.next = end;
        if (batch_store(key, &cur) == 0)
            batch_prog.call(ctx, GA_BATCH_PROG_TRACE);
        count(GA_DROP_TRACE_FULL, cur.count - end);
    }
    return 0;
}

/* ---- gpu_device(u32 ordinal, const char *uuid, const char *model, u64 cupti_ns,
 *                 u64 realtime_ns): a device's identity and a clock pair ---- */
int ga_gpu_device(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u32 ordinal = 0;
    u64 uuid = 0, model = 0, cupti_ns = 0, realtime_ns = 0;

    bpf_usdt_readarg(1, ctx, &ordinal);
    bpf_usdt_readarg(2, ctx, &uuid);
    bpf_usdt_readarg(3, ctx, &model);
    bpf_usdt_readarg(4, ctx, &cupti_ns);
    bpf_usdt_readarg(5, ctx, &realtime_ns);
    see_proc(tgid);
    struct ga_ev_device *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return 0;
    }
    ev->hdr.type = GA_EV_DEVICE;
    ev->hdr.tgid = tgid;
    ev->ordinal = ordinal;
    ev->pad = 0;
    ev->cupti_ns = cupti_ns;
    ev->realtime_ns = realtime_ns;
    /* NUL-terminated strings; a failed read leaves "" (the agent says unknown) */
    if (bpf_probe_read_user_str(ev->uuid, sizeof(ev->uuid), (const void *)uuid) < 0)
        ev->uuid[0] = 0;
    if (bpf_probe_read_user_str(ev->model, sizeof(ev->model), (const void *)model) < 0)
        ev->model[0] = 0;
    events.ringbuf_submit(ev, 0);
    return 0;
}

#endif /* GA_BPF_TIMELINE_H */
