/* procs.h: a process's life as the agent hears of it: attach (GA_EV_PROC_ATTACH),
 * the replay probe, how far its shim has published (GA_EV_PUBLISHED), its spans'
 * shapes (GA_EV_SHAPE), and exit
 * (GA_EV_PROC_EXIT, and its BPF state dropped). */
#ifndef GA_BPF_PROCS_H
#define GA_BPF_PROCS_H

#include "maps.h"

static __always_inline void emit_proc_event(u32 type, u32 tgid)
{
    struct ga_event_hdr *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return;
    }
    ev->type = type;
    ev->tgid = tgid;
    events.ringbuf_submit(ev, 0);
}

/* The process's name: its group leader's comm (the thread that fires `attach` may
 * be the shim's poller, ga-shim-poll), read at offsets from the running kernel's
 * BTF (agent/gpu_agent/system/btf.py); the current thread's comm if it is the
 * leader and the BTF gave none; else all NULs (the agent reads /proc). */
static __always_inline void proc_comm(u32 tgid, char *comm)
{
#if defined(GA_TASK_GROUP_LEADER_OFF) && defined(GA_TASK_COMM_OFF)
    u64 task = bpf_get_current_task();
    u64 leader = 0;
    if (bpf_probe_read_kernel(&leader, sizeof(leader), (const void *)(task + GA_TASK_GROUP_LEADER_OFF)) == 0 &&
        leader && bpf_probe_read_kernel(comm, GA_COMM_LEN, (const void *)(leader + GA_TASK_COMM_OFF)) == 0)
        return;
#endif
    if ((u32)bpf_get_current_pid_tgid() != tgid || bpf_get_current_comm(comm, GA_COMM_LEN) != 0)
        __builtin_memset(comm, 0, GA_COMM_LEN);
}

/* GA_EV_PROC_ATTACH: the agent hears of the process, and its name as it is now;
 * at most once a GA_ATTACH_EVERY_NS a process (the rest counted). */
static __always_inline void emit_proc_attach(u32 tgid)
{
    u64 now = bpf_ktime_get_ns();
    u64 *last = attach_last.lookup(&tgid);
    if (last && now - *last < GA_ATTACH_EVERY_NS) {
        count(GA_CNT_ATTACH_REPEATS, 1);
        return;
    }
    attach_last.update(&tgid, &now);
    struct ga_ev_proc_attach *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return;
    }
    ev->hdr.type = GA_EV_PROC_ATTACH;
    ev->hdr.tgid = tgid;
    proc_comm(tgid, ev->comm);
    struct ga_ev_proc_attach *note = attach_notes.ringbuf_reserve(sizeof(*note));
    if (note) {
        __builtin_memcpy(note, ev, sizeof(*note));
        attach_notes.ringbuf_submit(note, 0);
    }
    events.ringbuf_submit(ev, 0);
}

/* ---- attach: the uprobe exists so the kernel raises the semaphore
 * (ref_ctr_offset) in every process mapping the shim; the shim fires it once
 * it has attached. The agent hears of the process here, before its first
 * sampled launch, and sets up its Python stacks (py_procs). ---- */
int ga_attach(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    see_proc(tgid);
    emit_proc_attach(tgid);
    return 0;
}

/* `replay`: the agent holds a uprobe here only for its semaphore (a request for
 * the names); the shim fires it once it has replayed them. Nothing to do. */
int ga_replay(struct pt_regs *ctx)
{
    return 0;
}

/* ---- published(u64 until_ns, u32 final): the shim has fired the records of
 * every launch before until_ns; the agent closes its intervals by it. ---- */
int ga_published(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 until_ns = 0;
    u32 final = 0;
    bpf_usdt_readarg(1, ctx, &until_ns);
    bpf_usdt_readarg(2, ctx, &final);
    u32 start = see_proc(tgid);
    struct ga_ev_published *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return 0;
    }
    ev->hdr.type = GA_EV_PUBLISHED;
    ev->hdr.tgid = tgid;
    ev->until_ns = until_ns;
    ev->final = final != 0;
    ev->start = start;
    events.ringbuf_submit(ev, 0);
    return 0;
}

/* ---- period_shape(u64 span_start_ns, u64 span_end_ns, const u16 *shares, u32
 * nshares): how a published span's launches spread over it. Passed on whole; the
 * agent checks the shares (they are the process's own word about its own rows). */
int ga_period_shape(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 span_start_ns = 0, span_end_ns = 0, shares = 0;
    u32 nshares = 0;
    bpf_usdt_readarg(1, ctx, &span_start_ns);
    bpf_usdt_readarg(2, ctx, &span_end_ns);
    bpf_usdt_readarg(3, ctx, &shares);
    bpf_usdt_readarg(4, ctx, &nshares);
    if (nshares != GA_SHAPE_KNOTS) {
        count(GA_DROP_SHAPE_READ, 1);
        return 0;
    }
    u32 start = see_proc(tgid);
    struct ga_ev_shape *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        return 0;
    }
    if (bpf_probe_read_user(ev->shares, sizeof(ev->shares), (const void *)shares) != 0) {
        events.ringbuf_discard(ev, 0);
        count(GA_DROP_SHAPE_READ, 1);
        return 0;
    }
    ev->hdr.type = GA_EV_SHAPE;
    ev->hdr.tgid = tgid;
    ev->start = start;
    ev->pad = 0;
    ev->span_start_ns = span_start_ns;
    ev->span_end_ns = span_end_ns;
    events.ringbuf_submit(ev, 0);
    return 0;
}

/* A process that fired a probe has ended: the agent can flush and forget it. */
TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
#ifdef GA_HAVE_GROUP_DEAD
    /* Last thread of the group: the leader may exit before its threads. */
    if (!args->group_dead)
        return 0;
#else
    if ((u32)id != tgid)
        return 0;
#endif
    if (!procs.lookup(&tgid))
        return 0;
    procs.delete(&tgid);
    drop_budget.delete(&tgid);
    attach_last.delete(&tgid);
    emit_proc_event(GA_EV_PROC_EXIT, tgid);
    return 0;
}

#endif /* GA_BPF_PROCS_H */
