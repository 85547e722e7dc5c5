/* pcsampling.h: the PC sampling probes (contract in
 * shim/include/gpu_agent_pcsampling.h). Opt-in and at most a few batches per
 * collection window, so each goes to the agent as it is, and the agent joins the
 * samples with the kernels' launch stacks of the same window. */
#ifndef GA_BPF_PCSAMPLING_H
#define GA_BPF_PCSAMPLING_H

#include "maps.h"


/* ---- pc_sample_batch(const struct ga_pc_record *records, u32 nrecords, u32 dropped) ---- */
int ga_pc_sample_batch(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 records = 0;
    u32 nrecords = 0, dropped = 0;

    bpf_usdt_readarg(1, ctx, &records);
    bpf_usdt_readarg(2, ctx, &nrecords);
    bpf_usdt_readarg(3, ctx, &dropped);
    u32 start = see_proc(tgid);
    if (nrecords > GA_PC_BATCH_MAX) {
        count(GA_DROP_PC_READ, 1);
        return 0;
    }
    count(GA_DROP_PC_SAMPLES, dropped);
    struct ga_ev_pc_batch *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return 0;
    }
    ev->hdr.type = GA_EV_PC_BATCH;
    ev->hdr.tgid = tgid;
    ev->start = start;
    ev->nrecords = nrecords;
    ev->dropped = dropped;
    ev->pad = 0;
    /* 1..GA_PC_BATCH_MAX records, in a form the verifier bounds */
    u32 bytes = (((nrecords - 1) & (GA_PC_BATCH_MAX - 1)) + 1) * sizeof(struct ga_pc_record);
    if (nrecords && bpf_probe_read_user(ev->records, bytes, (const void *)records) != 0) {
        count(GA_DROP_PC_READ, 1);
        events.ringbuf_discard(ev, 0);
        return 0;
    }
    count(GA_CNT_PC_BATCHES, 1);
    events.ringbuf_submit(ev, 0);
    return 0;
}

/* A stall reason's name (at most `size` bytes at `name` in tgid) to the agent; an
 * empty one is not sent. Returns -1 once the ring buffer is full. */
static __always_inline int emit_stall_reason(u32 tgid, u32 index, u64 name, u32 size)
{
    struct ga_ev_stall_reason *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return -1;
    }
    ev->hdr.type = GA_EV_STALL_REASON;
    ev->hdr.tgid = tgid;
    ev->index = index;
    ev->pad = 0;
    long len = bpf_probe_read_user_str(ev->name, size < sizeof(ev->name) ? size : sizeof(ev->name),
                                       (const void *)name);
    if (len <= 1) {
        if (len < 0)
            count(GA_DROP_PC_READ, 1);
        events.ringbuf_discard(ev, 0);
        return 0;
    }
    events.ringbuf_submit(ev, 0);
    return 0;
}

/* ---- pc_stall_reason(u32 index, const char *name) ---- */
int ga_pc_stall_reason(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u32 index = 0;
    u64 name = 0;

    bpf_usdt_readarg(1, ctx, &index);
    bpf_usdt_readarg(2, ctx, &name);
    see_proc(tgid);
    emit_stall_reason(tgid, index, name, GA_STALL_NAME_LEN);
    return 0;
}

/* A module's cubin, at `address` in tgid, to the agent (the shim's or parcagpu's). */
static __always_inline void emit_cubin(u32 tgid, u32 start, u64 crc, u64 address, u64 size)
{
    struct ga_ev_cubin *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return;
    }
    ev->hdr.type = GA_EV_CUBIN;
    ev->hdr.tgid = tgid;
    ev->start = start;
    ev->pad = 0;
    ev->cubin_crc = crc;
    ev->address = address;
    ev->size = size;
    events.ringbuf_submit(ev, 0);
}

/* ---- cubin_loaded(u64 cubin_crc, const void *cubin, u64 cubin_size): the agent
 * reads the shim's copy from /proc/PID/mem ---- */
int ga_cubin_loaded(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 cubin_crc = 0, cubin = 0, cubin_size = 0;

    bpf_usdt_readarg(1, ctx, &cubin_crc);
    bpf_usdt_readarg(2, ctx, &cubin);
    bpf_usdt_readarg(3, ctx, &cubin_size);
    emit_cubin(tgid, see_proc(tgid), cubin_crc, cubin, cubin_size);
    return 0;
}

#endif /* GA_BPF_PCSAMPLING_H */
