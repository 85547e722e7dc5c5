/*
 * gpu_agent.bpf.c: the in-kernel half of gpu-agent (bcc C).
 *
 * The shim (shim/src) fires three data probes (see gpu_agent_probes.h):
 *   cuda_correlation -> remember (tgid, correlation id) -> sampled stack,
 *                       store each distinct stack once;
 *   kernel_batch     -> exact per-kernel GPU time into kernel_totals, and the
 *                       sampled share, joined on correlation id, into
 *                       kernel_sampled; for sampled launches, kernel start
 *                       minus launch time into the latency histogram;
 *   kernel_name      -> forwarded to the agent through the ring buffer;
 *   graph_node_stack / graph_node_cloned / graph_node_destroyed
 *                    -> node_stacks: graph node id -> the stack that created
 *                       it; kernel_batch joins graph kernel records to it
 *                       (capture_stack_id in the aggregation keys).
 * The aggregation maps come in two sets (totals0/sampled0/latency0, totals1/...);
 * `generation` says which one kernel_batch writes. The agent
 * (agent/gpu_agent/probes/bpf_session.py) drains by flipping the generation, waiting
 * until no program can still be writing the old set, then reading and
 * deleting the whole old set: no increment can land on a key being deleted,
 * so totals stay exact across drains, and in-kernel state stays bounded.
 *
 * Compiled by bcc with -DGA_BPF -I<repo>/shim/include; bcc prepends the USDT
 * argument readers (bpf_usdt_readarg) generated from the shim's stapsdt note.
 * Tunables (cflags): GA_AGG_ENTRIES, GA_SAMPLED_ENTRIES, GA_CORR_ENTRIES,
 * GA_STACK_ENTRIES, GA_NODE_ENTRIES, GA_RINGBUF_PAGES, GA_HAVE_GROUP_DEAD.
 */
#include <uapi/linux/ptrace.h>
#include "gpu_agent_probes.h"

#ifndef GA_AGG_ENTRIES
#define GA_AGG_ENTRIES 16384
#endif
#ifndef GA_SAMPLED_ENTRIES
#define GA_SAMPLED_ENTRIES 32768
#endif
#ifndef GA_CORR_ENTRIES
#define GA_CORR_ENTRIES 65536
#endif
#ifndef GA_STACK_ENTRIES
#define GA_STACK_ENTRIES 16384
#endif
#ifndef GA_NODE_ENTRIES
#define GA_NODE_ENTRIES 65536 /* live graph kernel nodes (captured + exec) */
#endif
#ifndef GA_LAT_ENTRIES
#define GA_LAT_ENTRIES 8192 /* (tgid, device) pairs x the buckets they use */
#endif
#ifndef GA_RINGBUF_PAGES
#define GA_RINGBUF_PAGES 1024 /* 4 MiB: a full name replay on attach fits */
#endif

/* Sampled launch -> its stack. LRU: a correlation id whose kernels never show
 * up (failed launch) must not pin memory. Not deleted on lookup because every
 * kernel of one graph launch carries the same correlation id. */
BPF_TABLE("lru_hash", struct ga_corr_key, struct ga_corr_val, corr_stacks, GA_CORR_ENTRIES);
BPF_TABLE("lru_hash", struct ga_stack_key, struct ga_stack, stacks, GA_STACK_ENTRIES);
/* Graph node -> the stack that created it. The shim deletes nodes as graphs
 * are destroyed; LRU bounds what a process that exits leaves behind. */
BPF_TABLE("lru_hash", struct ga_node_key, struct ga_node_val, node_stacks, GA_NODE_ENTRIES);

/* kernel_totals and kernel_sampled of the contract, twice: generation g
 * writes totals<g>/sampled<g>. Shared (not per-CPU) values, added atomically
 * (agg_slot): kernel_batch runs once per batch of up to 1024 records, so an
 * atomic add costs nothing that matters. Not per-CPU because a per-CPU element
 * is allocated from the percpu allocator, which in a BPF program cannot
 * populate new pages: a burst of new keys (thousands of new graphs at once)
 * failed with ENOMEM (tests/test_graphs.py, 10k graph churn). No prealloc: the
 * maps hold what the node runs, not entries * 80 bytes up front. */
BPF_F_TABLE("hash", struct ga_agg_key, struct ga_agg_val, totals0,
            GA_AGG_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct ga_agg_key, struct ga_agg_val, totals1,
            GA_AGG_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct ga_agg_key, struct ga_agg_val, sampled0,
            GA_SAMPLED_ENTRIES, BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct ga_agg_key, struct ga_agg_val, sampled1,
            GA_SAMPLED_ENTRIES, BPF_F_NO_PREALLOC);

/* Launch-to-start latency histogram (struct ga_lat_key -> ga_lat_val), in the
 * same two generations. */
BPF_F_TABLE("hash", struct ga_lat_key, struct ga_lat_val, latency0, GA_LAT_ENTRIES,
            BPF_F_NO_PREALLOC);
BPF_F_TABLE("hash", struct ga_lat_key, struct ga_lat_val, latency1, GA_LAT_ENTRIES,
            BPF_F_NO_PREALLOC);

/* The same maps, reached by index from kernel_batch (set by the agent at open):
 * agg_maps[g] = totals<g>, agg_maps[2 + g] = sampled<g>, lat_maps[g] =
 * latency<g>. kernel_batch looks its set up once per batch, so the loop body
 * has no branch on the generation: the verifier walks one body per record,
 * not two (the 1024-record loop is close to its 1M-instruction budget). */
BPF_ARRAY_OF_MAPS(agg_maps, "totals0", 4);
BPF_ARRAY_OF_MAPS(lat_maps, "latency0", 2);

/* Which set kernel_batch writes (0 or 1); flipped by the agent at each drain
 * and read once per batch, so one batch never spans both sets. */
BPF_ARRAY(generation, u32, 1);

/* Never read by a program. The agent stores generation's fd into it after a
 * flip: the kernel answers a userspace update of a map-in-map only after
 * synchronize_rcu() (syscall.c: maybe_wait_bpf_programs), i.e. after every
 * running non-sleepable program has returned, and a program that starts later
 * sees the new generation. */
BPF_ARRAY_OF_MAPS(drain_barrier, "generation", 1);

BPF_PERCPU_ARRAY(counters, u64, GA_COUNTER_MAX);

/* A struct ga_stack is 520 bytes: too big for the 512-byte BPF stack. */
BPF_PERCPU_ARRAY(stack_scratch, struct ga_stack, 1);

/* tgids that fired a probe (only those get a PROC_EXIT event) -> the process's
 * start tag: random, drawn at its first probe, deleted when it exits. Keys of
 * per-process state carry the tag, so that a new process given a dead one's pid
 * starts clean, even before the agent has seen the exit. (Not the task's start
 * time: bcc compiles against whatever kernel headers are installed, and their
 * task_struct layout need not be the running kernel's.) */
BPF_HASH(procs, u32, u32, 8192);

BPF_RINGBUF_OUTPUT(events, GA_RINGBUF_PAGES);

/* Timelines (gpu-agent record --trace/--events, gpu-agent trace): trace_mode[0]
 * is 0 (none), 1 (every process) or 2 (the tgids in `traced`); kernel_batch then
 * also sends each valid record of a traced process as a GA_EV_KERNEL. */
BPF_ARRAY(trace_mode, u32, 1);
BPF_HASH(traced, u32, u32, 1024);
/* The events go out from a program of their own (ga_kernel_batch_trace), tail
 * called at the end of kernel_batch with its batch in trace_batch: inside
 * kernel_batch's loop they would take it past what the verifier walks. The
 * agent puts the program's fd in trace_prog[0]. */
struct trace_batch {
    u64 recs;
    u32 tgid;
    u32 count;
    u32 start;
    u32 pad;
};
BPF_PERCPU_ARRAY(trace_batch_arg, struct trace_batch, 1);
BPF_PROG_ARRAY(trace_prog, 1);

static __always_inline void count(u32 idx, u64 n)
{
    u64 *v = counters.lookup(&idx);
    if (v)
        *v += n;
}

/* The process's start tag (0 while the table is full). */
static __always_inline u32 see_proc(u32 tgid)
{
    u32 *t = procs.lookup(&tgid);
    if (t)
        return *t;
    u32 tag = bpf_get_prandom_u32() | 1;
    procs.insert(&tgid, &tag); /* a racing thread of the process may win: use its tag */
    t = procs.lookup(&tgid);
    return t ? *t : 0;
}

#include "python_stack.h" /* ga_py_unwind: the launching thread's Python frames */

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

#include "graph_nodes.h"

/* ---- kernel_batch(const struct ga_kernel_record *recs, u32 count,
 *                   u32 record_size, u32 dropped) ---- */
struct batch_ctx {
    u64 recs;
    u32 tgid;
    u32 count;
    u32 start;              /* the process's start tag */
    u32 trace;              /* 1: send each record as a GA_EV_KERNEL (timelines) */
    void *totals;           /* this generation's maps (agg_maps, lat_maps) */
    void *sampled;
    void *latency;
};

#include "aggregate.h"

/* This generation's aggregation maps into bc; -1 if they are not there (the agent
 * fills agg_maps/lat_maps before it attaches anything). */
static __always_inline int batch_maps(struct batch_ctx *bc)
{
    u32 zero = 0;
    u32 *g = generation.lookup(&zero);
    u32 gen = (g && *g) ? 1 : 0;
    u32 it = gen, is = gen + 2, il = gen;
    bc->totals = agg_maps.lookup(&it);
    bc->sampled = agg_maps.lookup(&is);
    bc->latency = lat_maps.lookup(&il);
    return (bc->totals && bc->sampled && bc->latency) ? 0 : -1;
}

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

/* CUPTI-lost records one process may report in a second: GA_MAX_BATCH_DROPS, more
 * than any launch rate. Each batch's own count is bounded too, but a process
 * firing batches in a loop pushed the node's drop_cupti to 3.4e9; past its
 * budget a process's counts are refused. Deleted at its exit. */
struct ga_drop_budget {
    u64 second;
    u64 dropped;
};
BPF_HASH(drop_budget, u32, struct ga_drop_budget, 8192);
/* Lost records each process claimed past what it could have lost (refused claims'
 * counts), by tgid: read by the agent each interval and said in that process's
 * profile; deleted by the agent once it has reported the exit (LRU: never full). */
BPF_TABLE("lru_hash", u32, u64, drop_implausible, 4096);

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

int ga_kernel_batch(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
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
    u32 zero = 0;
    u32 *g = generation.lookup(&zero);
    u32 gen = (g && *g) ? 1 : 0;
    u32 it = gen, is = gen + 2, il = gen;
    struct batch_ctx bc = {.recs = records, .tgid = tgid, .count = nrecords, .start = start,
                           .trace = 0};
    bc.totals = agg_maps.lookup(&it);
    bc.sampled = agg_maps.lookup(&is);
    bc.latency = lat_maps.lookup(&il);
    if (!bc.totals || !bc.sampled || !bc.latency) {
        /* The agent fills agg_maps/lat_maps before it attaches anything. */
        count(GA_DROP_AGG_FULL, nrecords);
        accept_drops(tgid, dropped);
        return 0;
    }
    /* A bounded loop, not bpf_loop(): bcc 0.26 does not relocate BPF-to-BPF
     * function references, so bpf_loop's callback arrives as NULL and the
     * verifier rejects it ("R2 type=scalar expected=func"). The verifier
     * walks at most GA_BATCH_MAX iterations of this body. */
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < GA_BATCH_MAX; i++) {
        if (i >= nrecords)
            break;
        batch_one(i, &bc);
    }
    /* Decided after the loop, as what follows: a branch before it would double
     * what the verifier walks through the loop. */
    dropped = accept_drops(tgid, dropped);
    if (dropped)
        add_dropped(&bc, dropped);
    u32 *tm = trace_mode.lookup(&zero);
    if (tm && (*tm == 1 || (*tm == 2 && traced.lookup(&tgid)))) {
        struct trace_batch *tb = trace_batch_arg.lookup(&zero);
        if (tb) {
            tb->recs = records;
            tb->tgid = tgid;
            tb->count = nrecords;
            tb->start = start;
            trace_prog.call(ctx, 0); /* does not return when the program is there */
        }
        count(GA_DROP_TRACE_FULL, nrecords); /* no trace program: the events are lost */
    }
    return 0;
}

#include "timeline.h"

#include "kernel_names.h"
#include "pcsampling.h" /* opt-in PC sampling: batches, stall reasons, cubins */

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

/* ---- attach: the uprobe exists so the kernel raises the semaphore
 * (ref_ctr_offset) in every process mapping the shim; the shim fires it once
 * it has attached. The agent hears of the process here, before its first
 * sampled launch, and sets up its Python stacks (py_procs). ---- */
int ga_attach(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    see_proc(tgid);
    emit_proc_event(GA_EV_PROC_ATTACH, tgid);
    return 0;
}

/* `replay`: the agent holds a uprobe here only for its semaphore (a request for
 * the names); the shim fires it once it has replayed them. Nothing to do. */
int ga_replay(struct pt_regs *ctx)
{
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
    emit_proc_event(GA_EV_PROC_EXIT, tgid);
    return 0;
}

#include "parcagpu.h" /* parcagpu's probes: a second source of kernels */
