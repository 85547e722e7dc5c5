/* kernel_names.h: the kernel_name probe: a name's
 * chunks go to the agent as GA_EV_NAME_CHUNK events. */
#ifndef GA_BPF_KERNEL_NAMES_H
#define GA_BPF_KERNEL_NAMES_H

#include "maps.h"


/* ---- kernel_name(u64 kernel_id, u32 total_len, u32 offset,
 *                  const char *chunk, u32 chunk_len) ---- */
int ga_kernel_name(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 kernel_id = 0, chunk = 0;
    u32 total_len = 0, offset = 0, chunk_len = 0;

    bpf_usdt_readarg(1, ctx, &kernel_id);
    bpf_usdt_readarg(2, ctx, &total_len);
    bpf_usdt_readarg(3, ctx, &offset);
    bpf_usdt_readarg(4, ctx, &chunk);
    bpf_usdt_readarg(5, ctx, &chunk_len);
    see_proc(tgid);
    if (chunk_len > GA_NAME_CHUNK) {
        count(GA_DROP_BAD_RECORD, 1);
        return 0;
    }
    struct ga_ev_name_chunk *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return 0;
    }
    ev->hdr.type = GA_EV_NAME_CHUNK;
    ev->hdr.tgid = tgid;
    ev->kernel_id = kernel_id;
    ev->total_len = total_len;
    ev->offset = offset;
    ev->len = chunk_len;
    ev->flags = 0; /* verified: the agent checks the name's hash against kernel_id */
    /* 1..GA_NAME_CHUNK in a form the verifier bounds (see ga_cuda_correlation). */
    u32 n = ((chunk_len - 1) & (GA_NAME_CHUNK - 1)) + 1;
    if (chunk_len && bpf_probe_read_user(ev->data, n, (const void *)chunk) != 0) {
        count(GA_DROP_NAME_READ, 1);
        events.ringbuf_discard(ev, 0);
        return 0;
    }
    count(GA_CNT_NAME_CHUNKS, 1);
    events.ringbuf_submit(ev, 0);
    return 0;
}

/* Process attach and exit events: procs.h. */

#endif /* GA_BPF_KERNEL_NAMES_H */
