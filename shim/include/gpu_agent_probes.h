/*
 * gpu_agent_probes.h: THE probe contract of gpu-agent.
 *
 * This one file defines every USDT probe the shim fires, the argument list of
 * each, every record the shim hands to BPF, and every BPF map key/value and
 * ring-buffer event the Python agent decodes. It is included verbatim by:
 *   - the shim (shim/src/), built with a normal C/C++ compiler;
 *   - the BPF program (bpf/gpu_agent.bpf.c), compiled by bcc with -DGA_BPF;
 * and the Python decoder (agent/gpu_agent/contract.py) mirrors it with ctypes.
 * tests/test_contract.py compiles this header, prints every size and offset,
 * reads the shim's .note.stapsdt, and fails if any of the three disagree.
 *
 * Provider: "gpu_agent". Probes (name: arguments, in order):
 *
 *   attach            (no arguments). The only probe with a semaphore
 *                     (gpu_agent_attach_semaphore). The agent attaches a
 *                     uprobe with ref_ctr_offset to it; the kernel then raises
 *                     the semaphore in every process mapping the shim. The
 *                     shim polls it to turn CUPTI on and off: while it is 0
 *                     no CUPTI callback or activity work runs at all.
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
 *   kernel_batch      (const struct ga_kernel_record *records, u32 count,
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
 *                     attaches (the semaphore rises).
 */
#ifndef GPU_AGENT_PROBES_H
#define GPU_AGENT_PROBES_H

#ifdef GA_BPF
typedef __u8 ga_u8;
typedef __u32 ga_u32;
typedef __u64 ga_u64;
#else
#include <stdint.h>
typedef uint8_t ga_u8;
typedef uint32_t ga_u32;
typedef uint64_t ga_u64;
#endif

#define GA_PROVIDER "gpu_agent"
#define GA_SEMAPHORE_SYMBOL "gpu_agent_attach_semaphore"

/* Limits shared by both sides. */
#define GA_MAX_FRAMES 64     /* native frames per sampled stack */
#define GA_BATCH_MAX 1024    /* kernel records per kernel_batch probe */
#define GA_NAME_CHUNK 512    /* bytes per kernel_name probe */
#define GA_MAX_NAME_LEN (64 * 1024) /* longer names are cut and counted */

/* One kernel execution, converted by the shim from CUPTI's
 * CUpti_ActivityKernelN (CONCURRENT_KERNEL). 64 bytes, no padding holes. */
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
    ga_u64 reserved;
};
#define GA_REC_GRAPH 0x1u

/* ---- BPF maps (keys and values read by the agent) ---- */

/* corr_stacks: LRU hash, (tgid, correlation id) -> sampled stack. */
struct ga_corr_key {
    ga_u32 tgid;
    ga_u32 correlation_id;
};
struct ga_corr_val {
    ga_u64 stack_id;
    ga_u32 weight;
    ga_u32 cbid;
    ga_u64 launch_ns;       /* cuda_correlation's launch_ns (0: unknown) */
};

/* stacks: LRU hash, (tgid, stack id) -> frames. */
struct ga_stack_key {
    ga_u32 tgid;
    ga_u32 pad;
    ga_u64 stack_id;
};
struct ga_stack {
    ga_u32 nframes;
    ga_u32 cbid;
    ga_u64 ips[GA_MAX_FRAMES];
};

/* kernel_totals (stack_id = 0) and kernel_sampled: per-CPU hash maps (the
 * BPF program keeps two generations of each and the agent drains the one no
 * program writes; names totals<g>/sampled<g> there, same keys and values).
 * totals hold every kernel's exact GPU ns; sampled holds the records whose
 * launch was sampled, weighted by the inverse sampling probability. */
struct ga_agg_key {
    ga_u32 tgid;
    ga_u32 device_id;
    ga_u32 stream_id;
    ga_u32 graph_id;
    ga_u64 kernel_id;
    ga_u64 stack_id;
};
struct ga_agg_val {
    ga_u64 gpu_ns;
    ga_u64 launches;
    ga_u64 weighted_ns;     /* sum of gpu_ns * weight (sampled map only) */
    ga_u64 weighted_launches;
};

/* latency0/1: per-CPU hashes, generation-flipped like the aggregation maps:
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
    GA_COUNTER_MAX
};

/* ---- ring buffer events (BPF -> agent) ---- */
enum ga_event_type {
    GA_EV_NAME_CHUNK = 1,
    GA_EV_NEW_STACK = 2,
    GA_EV_PROC_EXIT = 3,
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
    ga_u32 pad;
    char data[GA_NAME_CHUNK];
};
struct ga_ev_new_stack {
    struct ga_event_hdr hdr;
    ga_u64 stack_id;
};
struct ga_ev_proc_exit {
    struct ga_event_hdr hdr;
};

#endif /* GPU_AGENT_PROBES_H */
