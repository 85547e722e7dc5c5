/*
 * gpu_agent_pcsampling.h: the PC sampling part of the probe contract
 * (gpu_agent_probes.h includes it before its probe table; same rules).
 *
 * Opt-in (GPU_AGENT_PC_SAMPLING=1): the shim turns on CUPTI's PC Sampling API in
 * each CUDA context it sees launch, in continuous mode with start/stop control,
 * and samples only inside its collection windows (started when a window opens,
 * stopped and drained when it closes). Probes:
 *
 *   pc_sample_batch   (const struct ga_pc_record *records, u32 nrecords,
 *                      u32 dropped)
 *                     Fired on the shim's poller after a window's samples were
 *                     drained: at most GA_PC_BATCH_MAX records, one per (pc,
 *                     stall reason) with samples. dropped = samples CUPTI
 *                     reported lost, plus records the shim could not hand on,
 *                     since the previous batch.
 *
 *   pc_stall_reason   (u32 index, const char *name)
 *                     One of CUPTI's stall reasons of this process's GPUs: its
 *                     index (ga_pc_record.stall_reason) and name as CUPTI gives
 *                     it ("smsp__pcsamp_warps_issue_stalled_<reason>", NUL
 *                     terminated). Fired once per reason when sampling is set
 *                     up, and again when an agent attaches or asks (`replay`).
 *
 *   cubin_loaded      (u64 cubin_crc, const void *cubin, u64 cubin_size)
 *                     A module's cubin (CUPTI_CBID_RESOURCE_MODULE_LOADED), by
 *                     the CRC CUPTI gives its samples. The shim keeps a copy at
 *                     `cubin` for the process's life (up to
 *                     GPU_AGENT_PC_CUBIN_MB in all), so that the agent can read
 *                     it from /proc/PID/mem when it likes and take line info
 *                     from it. Replayed like pc_stall_reason.
 */
#ifndef GPU_AGENT_PCSAMPLING_H
#define GPU_AGENT_PCSAMPLING_H

#define GA_PC_BATCH_MAX 64       /* records per pc_sample_batch probe */
#define GA_STALL_NAME_LEN 128    /* CUPTI_STALL_REASON_STRING_SIZE */

/* One PC's samples of one stall reason, from CUPTI's CUpti_PCSamplingPCData.
 * 32 bytes, no padding holes. */
struct ga_pc_record {
    ga_u64 cubin_crc;       /* the function's module (cubin_loaded) */
    ga_u64 pc_offset;       /* from the function's start, as the cubin's line table */
    ga_u64 kernel_id;       /* the function's mangled name, as kernel_name announces */
    ga_u32 stall_reason;    /* a pc_stall_reason index */
    ga_u32 samples;
};

/* Ring-buffer events (BPF -> agent), types GA_EV_PC_BATCH.. in ga_event_type. */
struct ga_ev_pc_batch {
    struct ga_event_hdr hdr;
    ga_u32 start;           /* the process's start tag */
    ga_u32 nrecords;
    ga_u32 dropped;
    ga_u32 pad;
    struct ga_pc_record records[GA_PC_BATCH_MAX];
};
struct ga_ev_stall_reason {
    struct ga_event_hdr hdr;
    ga_u32 index;
    ga_u32 pad;
    char name[GA_STALL_NAME_LEN];
};
struct ga_ev_cubin {
    struct ga_event_hdr hdr;
    ga_u32 start;           /* the process's start tag: its cubins are its own */
    ga_u32 pad;
    ga_u64 cubin_crc;
    ga_u64 address;         /* in the process: read it from /proc/PID/mem */
    ga_u64 size;
};

#endif /* GPU_AGENT_PCSAMPLING_H */
