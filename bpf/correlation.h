/* correlation.h: the cuda_correlation probe: a sampled launch's correlation id ->
 * its stack (corr_stacks), which kernel_batch joins each record to. */
#ifndef GA_BPF_CORRELATION_H
#define GA_BPF_CORRELATION_H

#include "maps.h"
#include "stacks.h"

/* ---- cuda_correlation(u32 corr, u32 cbid, u64 stack_id, const u64 *frames,
 *                       u32 nframes, u32 weight, u64 launch_ns) ---- */
int ga_cuda_correlation(struct pt_regs *ctx)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u32 correlation_id = 0, cbid = 0, nframes = 0, weight = 0;
    u64 stack_id = 0, frames = 0, launch_ns = 0;

    bpf_usdt_readarg(1, ctx, &correlation_id);
    bpf_usdt_readarg(2, ctx, &cbid);
    bpf_usdt_readarg(3, ctx, &stack_id);
    bpf_usdt_readarg(4, ctx, &frames);
    bpf_usdt_readarg(5, ctx, &nframes);
    bpf_usdt_readarg(6, ctx, &weight);
    bpf_usdt_readarg(7, ctx, &launch_ns);
    count(GA_CNT_SAMPLES, 1);
    u32 start = see_proc(tgid);
    /* The stack first: the join below must carry the id that covers the
     * Python frames. */
    stack_id = store_stack(pid_tgid, start, stack_id, frames, nframes, cbid);

    struct ga_corr_key ck = {.tgid = tgid, .correlation_id = correlation_id, .start = start, .pad = 0};
    struct ga_corr_val cv = {.stack_id = stack_id, .weight = weight, .cbid = cbid,
                             .launch_ns = launch_ns, .tid = (u32)pid_tgid, .pad = 0};
    corr_stacks.update(&ck, &cv);
    return 0;
}

#endif /* GA_BPF_CORRELATION_H */
