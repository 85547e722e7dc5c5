/* stacks.h: a sampled launch's stack, native frames and Python frames, stored once
 * per distinct stack and announced to the agent (GA_EV_NEW_STACK). */
#ifndef GA_BPF_STACKS_H
#define GA_BPF_STACKS_H

#include "maps.h"
#include "python_stack.h"

/* Store s (filled) as the stack of (tgid, start, stack_id), once, and announce it
 * with GA_EV_NEW_STACK. Returns stack_id. */
static __always_inline u64 announce_stack(u32 tgid, u32 start, u64 stack_id, struct ga_stack *s)
{
    struct ga_stack_key sk = {.tgid = tgid, .start = start, .stack_id = stack_id};
    /* NOEXIST: a racing thread of the same process may have stored it
     * first; it also sent the NEW_STACK event. */
    int err = stacks.insert(&sk, s);
    if (err == -17 /* EEXIST */)
        return stack_id;
    if (err) {
        count(GA_DROP_STACK_FULL, 1);
        return stack_id;
    }
    count(GA_CNT_NEW_STACKS, 1);

    struct ga_ev_new_stack *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return stack_id;
    }
    ev->hdr.type = GA_EV_NEW_STACK;
    ev->hdr.tgid = tgid;
    ev->stack_id = stack_id;
    ev->start = start;
    ev->pad = 0;
    events.ringbuf_submit(ev, 0);
    return stack_id;
}

/* Store the stack of the calling thread: the shim's native frames (frames,
 * nframes, hashed to stack_id) plus its Python frames, once per distinct stack,
 * announced to the agent with GA_EV_NEW_STACK. Returns the stack id to use
 * (it covers the Python frames, if any). */
static __always_inline u64 store_stack(u64 pid_tgid, u32 start, u64 stack_id, u64 frames,
                                       u32 nframes, u32 cbid)
{
    u32 tgid = pid_tgid >> 32;
    /* From here on stack_id also covers the Python frames, if any. */
    stack_id = ga_py_unwind(tgid, start, (u32)pid_tgid, stack_id);

    struct ga_stack_key sk = {.tgid = tgid, .start = start, .stack_id = stack_id};
    if (stacks.lookup(&sk))
        return stack_id;

    u32 zero = 0;
    struct ga_stack *s = stack_scratch.lookup(&zero);
    if (!s)
        return stack_id;
    if (nframes > GA_MAX_FRAMES)
        nframes = GA_MAX_FRAMES;
    s->nframes = nframes;
    s->cbid = cbid;
    /* One read of the whole array. The length is written so the verifier
     * sees 8..512 bytes directly (a plain clamp gets reordered by clang). */
    if (nframes) {
        u32 bytes = (((nframes - 1) & (GA_MAX_FRAMES - 1)) + 1) * 8;
        if (bpf_probe_read_user(s->ips, bytes, (const void *)frames) != 0) {
            count(GA_DROP_STACK_READ, 1);
            return stack_id;
        }
    }
    return announce_stack(tgid, start, stack_id, s);
}

#endif /* GA_BPF_STACKS_H */
