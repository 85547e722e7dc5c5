/*
 * gpu_agent_probes.h: THE probe contract of gpu-agent.
 *
 * This one file defines every USDT probe the shim fires, the argument list of
 * each, every record the shim hands to BPF, and every BPF map key/value and
 * ring-buffer event the Python agent decodes. It is included verbatim by:
 *   - the shim (shim/src/), built with a normal C/C++ compiler;
 *   - the BPF program (bpf/gpu_agent.bpf.c), compiled by bcc with -DGA_BPF;
 * and the Python decoder (agent/gpu_agent/probes/contract.py) mirrors it with ctypes.
 * tests/test_contract.py compiles this header, prints every size and offset,
 * reads the shim's .note.stapsdt, and fails if any of the three disagree.
 *
 * Provider: "gpu_agent". Probes (name: arguments, in order):
 *
 *   attach            (no arguments). Carries the semaphore
 *                     gpu_agent_attach_semaphore. The agent attaches a
 *                     uprobe with ref_ctr_offset to it; the kernel then raises
 *                     the semaphore in every process mapping the shim. The
 *                     shim polls it to turn CUPTI on and off: while it is 0
 *                     no CUPTI callback or activity work runs at all.
 *
 *   replay            (no arguments). Carries the semaphore
 *                     gpu_agent_replay_semaphore: an agent's request for
 *                     everything the shim announces only once. The kernel
 *                     raises a probe's semaphore once per probe, not once per
 *                     uprobe consumer, so a second agent attaching `attach` is
 *                     invisible to the shim. So every agent, when it starts,
 *                     holds a uprobe on `replay` for 2 s; a shim that is
 *                     attached and sees this semaphore rise from 0, or still
 *                     up 0.8 s after its last replay (another agent's request
 *                     hid this one's rise), fires kernel_name for every known
 *                     name and `attach` again, then `replay` itself (an
 *                     acknowledgement).
 *
 *   cuda_correlation  (u32 correlation_id, u32 cbid, u64 stack_id,
 *                      const u64 *frames, u32 nframes, u32 weight,
 *                      u64 launch_ns)
 *                     Fired at a *sampled* launch (API enter) on the launching
 *                     thread. frames[0] is the innermost return address
 *                     (the CUDA API), eh_frame-unwound by the shim, with the
 *                     shim's and CUPTI's own frames removed. stack_id is a
 *                     64-bit hash of frames (never 0). weight is the inverse
 *                     sampling probability (1 for forced samples: first launch
 *                     of a function, first launch of a graph exec).
 *                     launch_ns is cuptiGetTimestamp() at the launch, on the
 *                     clock of the kernel records' start_ns (0: unknown); BPF
 *                     turns start_ns - launch_ns into the launch-to-start
 *                     latency histogram (sampled, non-graph launches only).
 *
 *   kernel_batch      (const struct ga_kernel_record *records, u32 nrecords,
 *                      u32 record_size, u32 dropped)
 *                     Fired once per chunk of at most GA_BATCH_MAX records
 *                     taken from one completed CUPTI activity buffer; carries
 *                     every kernel's exact timing. dropped = CUPTI records
 *                     lost since the previous batch (buffer pool exhausted or
 *                     CUPTI's own dropped count).
 *
 *   kernel_name       (u64 kernel_id, u32 total_len, u32 offset,
 *                      const char *chunk, u32 chunk_len)
 *                     The mangled name of kernel_id, in chunks of at most
 *                     GA_NAME_CHUNK bytes (names can be thousands of bytes and
 *                     are never truncated). Fired when the shim first sees a
 *                     name, and again for all known names whenever an agent
 *                     attaches (the semaphore rises) or asks (`replay`).
 *
 *   graph_node_stack  (u64 node_id, u64 stack_id, const u64 *frames,
 *                      u32 nframes)
 *                     Fired (while attached) when CUDA creates a kernel node
 *                     in a graph (CUPTI resource callback GRAPHNODE_CREATED,
 *                     which runs inside the API that created the node: the
 *                     capturing launch during stream capture, or
 *                     cuGraphAddKernelNode), on that thread. node_id is
 *                     cuptiGetGraphNodeId(node); frames/nframes/stack_id as in
 *                     cuda_correlation. Never sampled: BPF stores the stack
 *                     (with the thread's Python frames) and remembers it in
 *                     node_stacks under (tgid, node_id).
 *
 *   graph_node_cloned  (u64 original_node_id, u64 node_id)
 *                     GRAPHNODE_CLONED: node_id was cloned from
 *                     original_node_id (graph instantiation: exec node from
 *                     captured node; cuGraphClone; child graphs). BPF copies
 *                     original_node_id's node_stacks entry to node_id.
 *
 *   gpu_device        (u32 ordinal, const char *uuid, const char *model,
 *                      u64 cupti_ns, u64 realtime_ns)
 *                     A CUDA device of the process: its ordinal, its UUID
 *                     ("GPU-" and 32 hex digits with dashes, as nvidia-smi and
 *                     DCGM write it; "" if unknown) and model name, NUL
 *                     terminated; plus one reading of CUPTI's clock and of
 *                     CLOCK_REALTIME taken together, which maps the records'
 *                     times to wall-clock time. Fired from the poller after
 *                     an attach and after every replay request.
 *
 *   pc_sample_batch, pc_stall_reason, cubin_loaded: PC sampling (opt-in), in
 *                     gpu_agent_pcsampling.h with their records.
 *
 *   published         (u64 until_ns, u32 final)
 *                     Fired by the poller while the shim collects in windows
 *                     (duty cycle > 1): at the attach, after every period's
 *                     release of records and at a detach or exit. Every launch
 *                     made before until_ns (CLOCK_MONOTONIC) has been published:
 *                     its period's weighted records went out in kernel_batch
 *                     before this probe (a record CUPTI hands over later still
 *                     goes, late). final: the shim published everything it held
 *                     (a detach, an exit). The agent holds an interval's profile
 *                     until every attached shim has published past its end
 *                     (or a bound: docs/estimator.md).
 *
 *   period_shape      (u64 span_start_ns, u64 span_end_ns, const u16 *shares,
 *                      u32 nshares)
 *                     How a published span's launches spread over it, fired
 *                     just before the span's first records can go (with its
 *                     weight): shares[j] of 65535 of them were made before
 *                     span_start_ns + (j + 1) / GA_SHAPE_KNOTS of the span;
 *                     nshares is GA_SHAPE_KNOTS. The agent splits the span's
 *                     rows over its intervals by these shares, not by time
 *                     alone (a period of 10 s whose window slowed the job, or
 *                     that idled in part). Fired only where the shim counts
 *                     launches all through the span (the launch callbacks with
 *                     no teardowns, or the calibrated launch counter); a span
 *                     with no shape is spread by time.
 *
 *   graph_node_destroyed  (u64 node_id)
 *                     A node was destroyed (GRAPHNODE_DESTROY_STARTING, or one
 *                     per exec node the shim recorded for an exec graph at
 *                     GRAPHEXEC_DESTROY_STARTING): BPF deletes its entry. Fired
 *                     late, from the shim's poller after its next-but-one
 *                     activity flush, so the node's last kernel records (which
 *                     arrive in buffers) still find it.
 */
#ifndef GPU_AGENT_PROBES_H
#define GPU_AGENT_PROBES_H

#ifdef GA_BPF
typedef __u8 ga_u8;
typedef __u16 ga_u16;
typedef __u32 ga_u32;
typedef __u64 ga_u64;
#else
#include <stdint.h>
typedef uint8_t ga_u8;
typedef uint16_t ga_u16;
typedef uint32_t ga_u32;
typedef uint64_t ga_u64;
#endif

#define GA_PROVIDER "gpu_agent"
#define GA_SEMAPHORE_SYMBOL "gpu_agent_attach_semaphore"
#define GA_REPLAY_SEMAPHORE_SYMBOL "gpu_agent_replay_semaphore"
/* The contract's version. The shim exports it as a uint32 under
 * GA_CONTRACT_VERSION_SYMBOL; the agent reads it from the shim file before it
 * attaches, and refuses a shim of another version with one clear line instead
 * of misreading its probes. Bump it whenever a probe's arguments, a shared
 * struct, an enum or a constant below changes meaning. */
#define GA_CONTRACT_VERSION 7u
#define GA_CONTRACT_VERSION_SYMBOL "gpu_agent_contract_version"

/* Limits shared by both sides. */
#define GA_MAX_FRAMES 64     /* native frames per sampled stack */
#define GA_BATCH_MAX 1024    /* kernel records per kernel_batch probe */
#define GA_NAME_CHUNK 512    /* bytes per kernel_name probe */
#define GA_MAX_NAME_LEN (64 * 1024) /* longer names are cut and counted; a
                                     * kernel id hashes at most this many bytes */

/* ---- The probe table: the one machine-readable list of probes ----
 * Each entry is P(name, nargs, (type, arg), ...), arguments in the order the
 * probe passes them. GA_PROBE_TABLE(P) is every probe; the two semaphore probes
 * (no arguments; fired by shim/src/attach_probe.cpp, which defines their
 * semaphores) and the data probes are also listed apart. The shim's fire helpers
 * and the test firer are generated from the data table (gpu_agent_fire.h);
 * tests/test_contract.py expands the table with the C preprocessor and checks
 * contract.PROBES, the shim's and the firer's stapsdt notes, and the BPF
 * program's bpf_usdt_readarg() calls against it. The comment above says what
 * each probe means. */
#define GA_SEMAPHORE_PROBE_TABLE(P) \
    P(attach, 0) \
    P(replay, 0)
#define GA_DATA_PROBE_TABLE(P) \
    P(cuda_correlation, 7, (ga_u32, correlation_id), (ga_u32, cbid), (ga_u64, stack_id), \
      (const ga_u64 *, frames), (ga_u32, nframes), (ga_u32, weight), (ga_u64, launch_ns)) \
    P(kernel_batch, 4, (const struct ga_kernel_record *, records), (ga_u32, nrecords), \
      (ga_u32, record_size), (ga_u32, dropped)) \
    P(kernel_name, 5, (ga_u64, kernel_id), (ga_u32, total_len), (ga_u32, offset), \
      (const char *, chunk), (ga_u32, chunk_len)) \
    P(graph_node_stack, 4, (ga_u64, node_id), (ga_u64, stack_id), (const ga_u64 *, frames), \
      (ga_u32, nframes)) \
    P(graph_node_cloned, 2, (ga_u64, original_node_id), (ga_u64, node_id)) \
    P(graph_node_destroyed, 1, (ga_u64, node_id)) \
    P(gpu_device, 5, (ga_u32, ordinal), (const char *, uuid), (const char *, model), \
      (ga_u64, cupti_ns), (ga_u64, realtime_ns)) \
    P(pc_sample_batch, 3, (const struct ga_pc_record *, records), (ga_u32, nrecords), \
      (ga_u32, dropped)) \
    P(pc_stall_reason, 2, (ga_u32, index), (const char *, name)) \
    P(cubin_loaded, 3, (ga_u64, cubin_crc), (const void *, cubin), (ga_u64, cubin_size)) \
    P(published, 2, (ga_u64, until_ns), (ga_u32, final)) \
    P(period_shape, 4, (ga_u64, span_start_ns), (ga_u64, span_end_ns), (const ga_u16 *, shares), \
      (ga_u32, nshares))
#define GA_PROBE_TABLE(P) GA_SEMAPHORE_PROBE_TABLE(P) GA_DATA_PROBE_TABLE(P)

/* GA_MAP(n, f, a1, ..., an) is "f a1, ..., f an": with f(type, arg), it turns a
 * table entry's arguments into a parameter list (GA_ARG_DECL) or an argument
 * list (GA_ARG_NAME). */
#define GA_MAP(n, f, ...) GA_MAP_##n(f, ##__VA_ARGS__)
#define GA_MAP_0(f)
#define GA_MAP_1(f, a) f a
#define GA_MAP_2(f, a, ...) f a, GA_MAP_1(f, __VA_ARGS__)
#define GA_MAP_3(f, a, ...) f a, GA_MAP_2(f, __VA_ARGS__)
#define GA_MAP_4(f, a, ...) f a, GA_MAP_3(f, __VA_ARGS__)
#define GA_MAP_5(f, a, ...) f a, GA_MAP_4(f, __VA_ARGS__)
#define GA_MAP_6(f, a, ...) f a, GA_MAP_5(f, __VA_ARGS__)
#define GA_MAP_7(f, a, ...) f a, GA_MAP_6(f, __VA_ARGS__)
#define GA_ARG_DECL(type, arg) type arg
#define GA_ARG_NAME(type, arg) arg

/* One kernel execution, converted by the shim from CUPTI's
 * CUpti_ActivityKernelN (CONCURRENT_KERNEL). 104 bytes, no padding holes. */
struct ga_kernel_record {
    ga_u64 start_ns;        /* GPU start, CUPTI timestamp clock */
    ga_u64 end_ns;          /* GPU end */
    ga_u64 kernel_id;       /* FNV-1a 64 of the mangled name, never 0 */
    ga_u64 graph_node_id;   /* 0 unless launched from a graph */
    ga_u32 correlation_id;  /* the launch API's correlation id */
    ga_u32 device_id;
    ga_u32 context_id;
    ga_u32 stream_id;
    ga_u32 graph_id;        /* 0 unless launched from a graph */
    ga_u32 flags;           /* GA_REC_* */
    ga_u32 weight;          /* records this record stands for: the shim collects
                             * in one time window of every N (its duty cycle),
                             * and weighs each windowed record by its period's
                             * launches / its window's launches (about N;
                             * rounded to an integer without bias;
                             * shim/src/window.cpp),
                             * so BPF adds weight x the record to the totals'
                             * weighted sums. 1: continuous collection. 0 (an
                             * older shim) counts as 1. */
    ga_u32 join_max_lag_us; /* 0: no limit. Else a sampled launch (corr_stacks)
                             * joins this record only if the record started at
                             * most this long after the launch: with collection
                             * windows a stale sample of an earlier window can
                             * carry the same correlation id (seen on an H200:
                             * 25x too many joins). The shim sets the time since
                             * the last window opened before the kernel started,
                             * so only that window's launches can join it. */
    ga_u32 grid_x, grid_y, grid_z;    /* the launch's grid and block (timelines) */
    ga_u32 block_x, block_y, block_z;
    /* The stretch of time whose launches this record's weight stands for (its
     * period, with any window-less periods joined to it), CLOCK_MONOTONIC: the
     * agent spreads the record over its intervals by overlap. 0, 0: place it
     * where it arrives (continuous collection). */
    ga_u64 span_start_ns;
    ga_u64 span_end_ns;
};
#define GA_REC_GRAPH 0x1u
/* The shim found the record's times impossible (it started before the window
 * its launch was made in opened): BPF drops it under GA_DROP_IMPOSSIBLE. */
#define GA_REC_IMPOSSIBLE 0x2u
/* A record longer than this (about 73 minutes) is impossible too: no real
 * kernel record is, and ns x weight must not overflow BPF's 64-bit sums. */
#define GA_MAX_KERNEL_NS (1ull << 42)
/* A record weight above this is impossible too (a window stands for at most its
 * period's launches; GPU_AGENT_DUTY_CYCLE is at most 100000), and so is a batch
 * that reports more CUPTI drops than this: forged counters never reach the totals. */
#define GA_MAX_RECORD_WEIGHT (1u << 20)
#define GA_MAX_BATCH_DROPS (1u << 24)
/* The kernel id of a process's lost records in kernel_totals: kernel_batch's
 * `dropped` (records CUPTI had no buffer for) are added there as launches with
 * no GPU time, so each profile shows, per process, what it lost. */
#define GA_KERNEL_DROPPED 0xffffffffffffffffull

/* ---- BPF maps (keys and values read by the agent) ---- */

/* corr_stacks: LRU hash, (tgid, correlation id) -> sampled stack. */
struct ga_corr_key {
    ga_u32 tgid;
    ga_u32 correlation_id;
    ga_u32 start;           /* the process's start tag (below) */
    ga_u32 pad;
};
struct ga_corr_val {
    ga_u64 stack_id;
    ga_u32 weight;
    ga_u32 cbid;
    ga_u64 launch_ns;       /* cuda_correlation's launch_ns (0: unknown) */
    ga_u32 tid;             /* the launching thread (a timeline's flow arrow) */
    ga_u32 pad;
};

/* stacks: LRU hash, (tgid, stack id) -> frames. */
/* Per-process keys carry `start`, the process's start tag: drawn at random by BPF
 * at the process's first probe and forgotten at its exit (the `procs` map), so a
 * new process given a dead one's pid never meets the dead one's entries. */
struct ga_stack_key {
    ga_u32 tgid;
    ga_u32 start;
    ga_u64 stack_id;
};
struct ga_stack {
    ga_u32 nframes;
    ga_u32 cbid;
    ga_u64 ips[GA_MAX_FRAMES];
};

/* node_stacks: LRU hash, (tgid, graph node id) -> the stack that created the
 * node (graph_node_stack), copied to every clone (graph_node_cloned) and
 * deleted when the node is destroyed (graph_node_destroyed). */
struct ga_node_key {
    ga_u32 tgid;
    ga_u32 start;
    ga_u64 node_id;
};
struct ga_node_val {
    ga_u64 stack_id;        /* a key of `stacks` (and py_stacks) */
};

/* kernel_totals (stack_id = 0) and kernel_sampled: hash maps, added to atomically (the
 * BPF program keeps two generations of each and the agent drains the one no
 * program writes; names totals<g>/sampled<g> there, same keys and values).
 * totals hold every collected kernel's GPU ns and launches (exact), and in
 * weighted_ns / weighted_launches the same sums with each record times its
 * ga_kernel_record.weight: the estimate of the whole run's time when the shim
 * collects in duty-cycled windows (equal to the exact sums when it does not);
 * sampled holds the records whose launch was sampled, weighted by the inverse
 * sampling probability (the stack-sampling weight, not the window weight). */
struct ga_agg_key {
    ga_u32 tgid;
    ga_u32 device_id;
    ga_u32 stream_id;
    ga_u32 graph_id;
    ga_u64 kernel_id;
    ga_u64 stack_id;        /* sampled map: the launch's sampled stack; totals: 0 */
    ga_u64 capture_stack_id;/* GA_AGG_CAPTURED: the stack that created the graph node
                             * (node_stacks); else 0. In both maps. */
    ga_u32 graph_flags;     /* GA_AGG_* (graph kernels only; 0 otherwise) */
    ga_u32 start;           /* the process's start tag: a reused pid's rows stay apart */
    ga_u64 span_start_ns;   /* the record's span (ga_kernel_record): rows of */
    ga_u64 span_end_ns;     /* different periods stay apart. In both maps. */
};
/* ga_agg_key.graph_flags: what BPF knew about a graph kernel's node. */
#define GA_AGG_CAPTURED 0x1u   /* node_stacks had the node: capture_stack_id is set */
#define GA_AGG_NODE_UNKNOWN 0x2u /* graph_node_id != 0 but no node_stacks entry: the
                                  * node was created (captured) before the shim
                                  * attached, so its capture stack was never seen */
struct ga_agg_val {
    ga_u64 gpu_ns;
    ga_u64 launches;
    ga_u64 weighted_ns;     /* totals: sum of gpu_ns * record weight (windows);
                             * sampled: sum of gpu_ns * stack-sampling weight */
    ga_u64 weighted_launches;
};

/* latency0/1: hashes, generation-flipped like the aggregation maps:
 * (tgid, device, bucket) -> launches whose kernel started start_ns - launch_ns
 * in [2^bucket, 2^(bucket+1)) ns after the launch (bucket 0 also holds 0 ns),
 * and the sum of those latencies. Sampled launches only, and not graph
 * launches: the kernels of a graph share one launch, so later nodes would
 * count the earlier ones' run time. */
#define GA_LAT_BUCKETS 64
struct ga_lat_key {
    ga_u32 tgid;
    ga_u32 device_id;
    ga_u32 bucket;          /* floor(log2(ns)), 0..GA_LAT_BUCKETS-1 */
    ga_u32 pad;
};
struct ga_lat_val {
    ga_u64 count;
    ga_u64 sum_ns;
};

/* counters: array map indexed by enum ga_counter. */
enum ga_counter {
    GA_CNT_KERNELS = 0,        /* kernel records aggregated */
    GA_CNT_BATCHES,            /* kernel_batch probes seen */
    GA_CNT_SAMPLES,            /* cuda_correlation probes seen */
    GA_CNT_UNSAMPLED,          /* records with no sampled stack (not a drop) */
    GA_CNT_NEW_STACKS,         /* distinct stacks stored */
    GA_CNT_NAME_CHUNKS,        /* kernel_name chunks forwarded */
    GA_DROP_AGG_FULL,          /* aggregation map full: record lost */
    GA_DROP_STACK_FULL,        /* stack map update failed */
    GA_DROP_STACK_READ,        /* could not read frames from the app */
    GA_DROP_RECORD_READ,       /* could not read a kernel record */
    GA_DROP_BAD_RECORD,        /* record_size/count out of contract */
    GA_DROP_RINGBUF_FULL,      /* ring buffer reserve failed */
    GA_DROP_NAME_READ,         /* could not read a name chunk */
    GA_DROP_CUPTI,             /* records the shim reported as lost */
    GA_CNT_PY_STACKS,          /* sampled launches with Python frames */
    GA_CNT_PY_NO_THREAD,       /* Python process, launching thread has no thread
                                * state (a native thread): native-only stack */
    GA_DROP_PY_READ,           /* a Python frame could not be read or was not a
                                * code object: the Python stack ends there */
    GA_DROP_PY_STACK_FULL,     /* py_stacks update failed: native-only stack */
    GA_CNT_GRAPH_NODES,        /* graph_node_stack probes (capture stacks) seen */
    GA_CNT_GRAPH_CLONES,       /* graph_node_cloned with a known original */
    GA_CNT_GRAPH_CLONE_UNKNOWN,/* graph_node_cloned whose original was never seen */
    GA_CNT_GRAPH_DESTROYED,    /* graph_node_destroyed probes seen */
    GA_CNT_GRAPH_ATTRIBUTED,   /* graph kernel records joined to their capture stack */
    GA_CNT_GRAPH_NODE_UNKNOWN, /* graph kernel records whose node was never seen */
    GA_DROP_NODE_FULL,         /* node_stacks update failed */
    GA_CNT_STALE_JOIN,         /* a sampled launch refused as too old for the record
                                * (join_max_lag_us): the record counts as unsampled */
    GA_DROP_IMPOSSIBLE,        /* a record whose times cannot be true (end before
                                * start, longer than GA_MAX_KERNEL_NS, or flagged
                                * GA_REC_IMPOSSIBLE by the shim): kept out of the
                                * totals. The agent adds streams whose records sum
                                * to more GPU time than the interval had. */
    GA_CNT_TRACE_EVENTS,       /* kernel events sent for timelines */
    GA_DROP_TRACE_FULL,        /* kernel events lost: the ring buffer was full */
    GA_CNT_PG_CORRELATIONS,    /* parcagpu cuda_correlation probes seen */
    GA_CNT_PG_KERNELS,         /* parcagpu kernel_executed probes seen */
    GA_DROP_PG_ARGS,           /* a parcagpu probe whose site the agent has not
                                * registered, or whose arguments could not be read */
    GA_CNT_PC_BATCHES,         /* pc_sample_batch probes passed on */
    GA_DROP_PC_READ,           /* a pc_sample_batch (or cubin_loaded, pc_stall_reason)
                                * out of contract or unreadable */
    GA_DROP_PC_SAMPLES,        /* PC samples the shim reported as lost */
    GA_CNT_PG_ERRORS,          /* parcagpu error probes (the agent logs each kind once) */
    GA_DROP_IMPLAUSIBLE,       /* kernel_batch counts of lost records refused: past the
                                * batch's bound (GA_MAX_BATCH_DROPS) or its process's
                                * budget (as many a second). One per claim, so no process
                                * can inflate it; the records each process claimed are
                                * in the drop_implausible map, and its profile says so */
    GA_DROP_SHAPE_READ,        /* a period_shape out of contract or unreadable: its span
                                * is spread by time */
    GA_CNT_ATTACH_REPEATS,     /* attach probes within GA_ATTACH_EVERY_NS of the same
                                * process's last one, not sent on (a shim attaches
                                * once an agent; a process firing it in a loop filled
                                * the ring buffer: every other process's names lost) */
    GA_DROP_BATCH_CHAIN,       /* kernel records lost: a batch's next program could not
                                * be called, or found its entry gone (counted 1:
                                * bpf/maps.h batch_progress) */
    GA_COUNTER_MAX
};

/* ---- ring buffer events (BPF -> agent) ---- */
enum ga_event_type {
    GA_EV_NAME_CHUNK = 1,
    GA_EV_NEW_STACK = 2,
    GA_EV_PROC_EXIT = 3,
    GA_EV_PROC_ATTACH = 4,     /* the shim in tgid attached (CUPTI on): the agent
                                * looks for a Python interpreter in it now */
    GA_EV_KERNEL = 5,          /* one kernel of a traced process (timelines) */
    GA_EV_DEVICE = 6,          /* a gpu_device probe */
    GA_EV_PC_BATCH = 7,        /* gpu_agent_pcsampling.h */
    GA_EV_STALL_REASON = 8,
    GA_EV_CUBIN = 9,
    GA_EV_PG_PC = 10,          /* one PC of a parcagpu pc_sample_batch (gpu_agent_parcagpu.h) */
    GA_EV_PG_ERROR = 11,       /* a parcagpu error probe */
    GA_EV_PG_NAME = 12,        /* a parcagpu name BPF could not read (gpu_agent_parcagpu.h) */
    GA_EV_PUBLISHED = 13,      /* a published probe */
    GA_EV_SHAPE = 14,          /* a period_shape probe */
};
struct ga_event_hdr {
    ga_u32 type;
    ga_u32 tgid;
};
struct ga_ev_name_chunk {
    struct ga_event_hdr hdr;
    ga_u64 kernel_id;
    ga_u32 total_len;
    ga_u32 offset;
    ga_u32 len;
    ga_u32 flags;           /* GA_NAME_UNVERIFIED: a parcagpu name (gpu_agent_parcagpu.h) */
    char data[GA_NAME_CHUNK];
};
struct ga_ev_new_stack {
    struct ga_event_hdr hdr;
    ga_u64 stack_id;
    ga_u32 start;           /* the process's start tag (stacks' key) */
    ga_u32 pad;
};
struct ga_ev_proc_exit {
    struct ga_event_hdr hdr;
};
#define GA_COMM_LEN 16          /* the kernel's TASK_COMM_LEN */
#define GA_ATTACH_EVERY_NS 1000000000ull /* one attach event a process a second, at most */
struct ga_ev_proc_attach {
    struct ga_event_hdr hdr;
    char comm[GA_COMM_LEN];  /* the process's name (its leader's comm) as it attached,
                              * NUL-padded; all NULs where BPF could not read it. The
                              * agent's name for a process it reads too late to find
                              * in /proc (a short one, an agent behind on its events) */
};
struct ga_ev_published {
    struct ga_event_hdr hdr;
    ga_u64 until_ns;         /* published's arguments */
    ga_u32 final;
    ga_u32 start;            /* the process's start tag */
};
/* period_shape: the shares at each of the span's GA_SHAPE_KNOTS knots. */
#define GA_SHAPE_KNOTS 32
#define GA_SHAPE_ONE 65535u
struct ga_ev_shape {
    struct ga_event_hdr hdr;
    ga_u32 start;            /* the process's start tag */
    ga_u32 pad;
    ga_u64 span_start_ns;    /* period_shape's arguments */
    ga_u64 span_end_ns;
    ga_u16 shares[GA_SHAPE_KNOTS];
};
/* Timelines: while the `trace` config map says so (every process, or the tgids
 * in `traced`), kernel_batch also sends each valid record of a traced process,
 * with what BPF joined to it. */
struct ga_ev_kernel {
    struct ga_event_hdr hdr;
    ga_u32 start;            /* the process's start tag */
    ga_u32 launch_tid;       /* the sampled launch's thread (0: not sampled) */
    ga_u64 stack_id;         /* the sampled launch's stack (0: none); for a graph
                              * kernel, the graph launch's: its replay site */
    ga_u64 capture_stack_id; /* a graph kernel's node's capture stack (0: none) */
    ga_u64 launch_ns;        /* the sampled launch's CUPTI time (0: none) */
    struct ga_kernel_record rec;
};
#define GA_UUID_LEN 48
#define GA_MODEL_LEN 96
struct ga_ev_device {
    struct ga_event_hdr hdr;
    ga_u32 ordinal;
    ga_u32 pad;
    ga_u64 cupti_ns;
    ga_u64 realtime_ns;
    char uuid[GA_UUID_LEN];
    char model[GA_MODEL_LEN];
};

/* ---- Python stacks: gpu_agent_python.h (BPF <-> agent only) ---- */
#include "gpu_agent_python.h"
/* ---- PC sampling: gpu_agent_pcsampling.h (its records, events and probes' meaning) ---- */
#include "gpu_agent_pcsampling.h"
/* ---- parcagpu's probes as a second source: gpu_agent_parcagpu.h (BPF <-> agent only) ---- */
#include "gpu_agent_parcagpu.h"

#endif /* GPU_AGENT_PROBES_H */
