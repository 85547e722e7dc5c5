/* maps.h: the maps the programs share, with their sizes (tunable by cflags), and the
 * two helpers every program uses: count() (the node's counters) and see_proc() (a
 * process's start tag). */
#ifndef GA_BPF_MAPS_H
#define GA_BPF_MAPS_H


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
/* When each process's last attach event went out (bpf_ktime_get_ns), by tgid: at
 * most one a GA_ATTACH_EVERY_NS (procs.h). Deleted at its exit (LRU: never full). */
BPF_TABLE("lru_hash", u32, u64, attach_last, 8192);

BPF_RINGBUF_OUTPUT(events, GA_RINGBUF_PAGES);
/* Each attach event's copy, on a ring of its own (16 KiB: 680 notes) that the
 * agent's notes thread reads at once (probes/attach_notes.py): a process's maps and
 * interpreter are read while it lives, however far behind the main ring is. Best
 * effort: a note the full ring refuses loses nothing (the event still comes). */
BPF_RINGBUF_OUTPUT(attach_notes, 4);

/* Timelines (gpu-agent record --trace/--events, gpu-agent trace): trace_mode[0]
 * is 0 (none), 1 (every process) or 2 (the tgids in `traced`); kernel_batch then
 * also sends each valid record of a traced process as a GA_EV_KERNEL. */
BPF_ARRAY(trace_mode, u32, 1);
BPF_HASH(traced, u32, u32, 1024);
/* A kernel_batch probe's batch while its programs run. Its records go
 * GA_BATCH_CHUNK at a time, each program tail-calling the next (batch_prog[0]:
 * ga_kernel_batch_more), so that the verifier walks one chunk's loop and not
 * GA_BATCH_MAX iterations: kernel_batch's 1 024 took 1.28 s of the agent's 2.05 s of
 * program loads (the 2-core VM, 2026-12-02). A traced process's records then go out
 * as events the same way (batch_prog[1]: ga_kernel_batch_trace, timeline.h). Keyed
 * by the firing thread, which runs one probe at a time (a per-CPU slot could be
 * another thread's on a preemptible kernel). The chain is one program run, inside
 * one RCU read side: the drain's barrier holds as for one program, and gen is the
 * generation the whole batch adds to. A thread's entry is written whole before each
 * call (batch_store), in place once it is there: it stays for the thread's next
 * batch (LRU: a gone thread's goes in time). */
#define GA_BATCH_CHUNK 64
struct batch_progress {
    u64 recs;
    u32 tgid;
    u32 count;
    u32 start;
    u32 gen;
    u32 next;    /* the first record no program of the chain has taken */
    u32 dropped; /* CUPTI's losses as accepted (accept_drops), added at the end */
};
BPF_TABLE("lru_hash", u64, struct batch_progress, batch_progress, 4096);
BPF_PROG_ARRAY(batch_prog, 2);
#define GA_BATCH_PROG_MORE 0
#define GA_BATCH_PROG_TRACE 1
/* cur as the thread's entry, before the call to the next program of its chain:
 * written over in place where it is there (no map update a chunk); 0 once stored. */
static __always_inline int batch_store(u64 key, struct batch_progress *cur)
{
    struct batch_progress *p = batch_progress.lookup(&key);
    if (p) {
        __builtin_memcpy(p, cur, sizeof(*cur));
        return 0;
    }
    return batch_progress.update(&key, cur);
}
/* The thread's entry, as the program before it in the chain stored it: 1 where it is
 * there and has records left, 0 where it went (an LRU eviction) or is done. */
static __always_inline int batch_resume(u64 key, struct batch_progress *cur)
{
    bpf_probe_read_kernel(cur, sizeof(*cur), batch_progress.lookup(&key)); /* a miss reads 0s */
    return cur->tgid == (u32)(key >> 32) && cur->next < cur->count;
}
/* A full batch's chain: a tail call for each chunk, then one for each chunk's
 * events: within the kernel's 33 a program run. */
_Static_assert(2 * (GA_BATCH_MAX / GA_BATCH_CHUNK) <= 33, "a batch's chain past the tail-call limit");
/* Records CUPTI lost, as counted (accept_drops), by traced tgid: a timeline says
 * its own processes' losses, not the node's (drop_cupti: one process's 2^24 lost
 * records were every other timeline's). LRU; kept past the exit, for the timeline
 * built after it. */
BPF_TABLE("lru_hash", u32, u64, trace_drops, 4096);

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

#endif /* GA_BPF_MAPS_H */
