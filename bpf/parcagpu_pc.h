/* parcagpu_pc.h: parcagpu's PC sampling and error probes (included by parcagpu.h; contract in
 * gpu_agent_parcagpu.h). They become the events the shim's PC sampling gives
 * (pcsampling.h): stall-reason names and cubins as they are, and each PC record as
 * one GA_EV_PG_PC event, with the function's name copied now (CUPTI's string lives
 * only until parcagpu handles the batch), so pc_samples.py keeps one kind of
 * window whichever library sampled. */
#ifndef GA_BPF_PARCAGPU_PC_H
#define GA_BPF_PARCAGPU_PC_H

#include "parcagpu.h"
#include "pcsampling.h"


/* One CUpti_PCSamplingPCData of a batch: *slot points to it. */
static __always_inline void pg_pc_record(u32 tgid, u32 start, u64 slot)
{
    u64 rec = 0;
    struct ga_pg_cupti_pc pc = {};
    if (bpf_probe_read_user(&rec, sizeof(rec), (const void *)slot) != 0 || !rec ||
        bpf_probe_read_user(&pc, sizeof(pc), (const void *)rec) != 0 || pc.size < GA_PG_CUPTI_PC_BASE) {
        count(GA_DROP_PC_READ, 1);
        return;
    }
    struct ga_ev_pg_pc *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return;
    }
    ev->hdr.type = GA_EV_PG_PC;
    ev->hdr.tgid = tgid;
    ev->start = start;
    ev->cubin_crc = pc.cubin_crc;
    ev->pc_offset = pc.pc_offset;
    u64 n = pc.stall_reason_count;
    ev->reasons_cut = n > GA_PG_PC_REASONS;
    ev->nreasons = n > GA_PG_PC_REASONS ? GA_PG_PC_REASONS : (u32)n;
    /* 1..GA_PG_PC_REASONS entries, in a form the verifier bounds */
    u32 bytes = (((ev->nreasons - 1) & (GA_PG_PC_REASONS - 1)) + 1) * sizeof(struct ga_pg_stall);
    if (ev->nreasons && bpf_probe_read_user(ev->reasons, bytes, (const void *)pc.stall_reason) != 0) {
        count(GA_DROP_PC_READ, 1);
        events.ringbuf_discard(ev, 0);
        return;
    }
    long len = pc.function_name
        ? bpf_probe_read_user_str(ev->name, sizeof(ev->name), (const void *)pc.function_name) : 0;
    ev->name_len = len > 0 ? (u32)len - 1 : 0;
    events.ringbuf_submit(ev, 0);
}

/* ---- pc_sample_batch(const void **records, u32 count) ---- */
int ga_pg_pc_sample_batch(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 a[2] = {};
    if (pg_args(ctx, GA_PG_PROBE_PC_BATCH, 2, a))
        return 0;
    u64 records = a[0], n = a[1];
    if (n > GA_PG_PC_BATCH_MAX) {
        count(GA_DROP_PC_READ, 1);
        return 0;
    }
    u32 start = pg_see_proc(tgid);
    count(GA_CNT_PC_BATCHES, 1);
    for (u32 i = 0; i < GA_PG_PC_BATCH_MAX; i++) {
        if (i >= n)
            break;
        pg_pc_record(tgid, start, records + (u64)i * sizeof(u64));
    }
    return 0;
}

/* ---- stall_reason_map(const char *names, u32 count): slot i names reason i ---- */
int ga_pg_stall_reason_map(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 a[2] = {};
    if (pg_args(ctx, GA_PG_PROBE_STALL_MAP, 2, a))
        return 0;
    u64 names = a[0], n = a[1];
    pg_see_proc(tgid);
    for (u32 i = 0; i < GA_PG_STALL_MAX; i++) {
        if (i >= n)
            break;
        /* an empty slot (no reason has that index) sends nothing; pcsampling.h */
        if (emit_stall_reason(tgid, i, names + (u64)i * GA_PG_STALL_SLOT, GA_PG_STALL_SLOT) < 0)
            return 0;
    }
    return 0;
}

/* ---- cubin_loaded(u64 cubinCrc, const char *cubin, u64 cubinSize): parcagpu's
 * copy, read by the agent from /proc/PID/mem as the shim's ---- */
int ga_pg_cubin_loaded(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 a[3] = {};
    if (pg_args(ctx, GA_PG_PROBE_CUBIN, 3, a))
        return 0;
    u64 crc = a[0], cubin = a[1], size = a[2];
    emit_cubin(tgid, pg_see_proc(tgid), crc, cubin, size); /* pcsampling.h */
    return 0;
}

/* ---- error(s32 code, const char *message, const char *component) ---- */
int ga_pg_error(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 a[3] = {};
    if (pg_args(ctx, GA_PG_PROBE_ERROR, 3, a))
        return 0;
    u64 code = a[0], message = a[1], component = a[2];
    count(GA_CNT_PG_ERRORS, 1);
    struct ga_ev_pg_error *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return 0;
    }
    ev->hdr.type = GA_EV_PG_ERROR;
    ev->hdr.tgid = tgid;
    ev->code = (u32)code;
    ev->pad = 0;
    if (!message || bpf_probe_read_user_str(ev->message, sizeof(ev->message), (const void *)message) < 0)
        ev->message[0] = 0;
    if (!component || bpf_probe_read_user_str(ev->component, sizeof(ev->component), (const void *)component) < 0)
        ev->component[0] = 0;
    events.ringbuf_submit(ev, 0);
    return 0;
}

#endif /* GA_BPF_PARCAGPU_PC_H */
