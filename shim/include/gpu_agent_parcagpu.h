/* gpu_agent_parcagpu.h: reading parcagpu's probes, a second source of kernels
 * that only BPF and the agent share (the shim has no part in it). Included by
 * gpu_agent_probes.h, after its types; checked by tests/test_contract.py with it.
 *
 * parcagpu (github.com/parca-dev/parcagpu, src/probes.d) fires, provider
 * "parcagpu":
 *   cuda_correlation(u32 correlationId, int signedCbid, const char *name)
 *       at a launch's API exit, on the launching thread; its semaphore gates
 *       parcagpu's callback work, and parcagpu rate-limits it (100/s a thread);
 *   kernel_executed(u64 start, u64 end, u32 correlationId, u32 deviceId,
 *                   u32 streamId, u32 graphId, u64 graphNodeId, const char *name)
 *       once per kernel record it passes on;
 * and with its PC sampling on (PARCAGPU_PC_SAMPLING_RATE), read when present:
 *   pc_sample_batch(const void **records, u32 count)
 *       pointers to CUPTI's CUpti_PCSamplingPCData records (at most 128), each
 *       one PC's samples per stall reason; its functionName is CUPTI's allocation,
 *       valid only during the probe, so BPF copies it into the event;
 *   stall_reason_map(const char *names, u32 count)
 *       count 64-byte slots, slot i the name of stall reason index i (empty:
 *       none); fired while its semaphore is up, again when it rises;
 *   cubin_loaded(u64 cubinCrc, const char *cubin, u64 cubinSize)
 *       a module's cubin, kept by parcagpu; gated and re-fired like the map;
 *   error(s32 code, const char *message, const char *component)
 *       what went wrong in it (PC sampling refused, a bad setting): GA_EV_PG_ERROR.
 * The last two become the shim's GA_EV_STALL_REASON and GA_EV_CUBIN events; a PC
 * record becomes one GA_EV_PG_PC event (its function's kernel is found by name).
 * Their argument locations are whatever parcagpu's compiler chose, so BPF cannot
 * use bcc's generated readers (compiled for one file): the agent parses each
 * site's argument specs from the file's .note.stapsdt ("8@%rax", "-4@-20(%rbp)")
 * and stores them in the BPF hash pg_sites, keyed by the probe and the site's
 * offset within its page (what a uprobe's ip gives); the programs read the
 * arguments from the registers and memory those specs name. x86-64 only.
 *
 * A parcagpu kernel's kernel_id is a 64-bit mix of its name's address (CUPTI keeps
 * one name string per function) with the process's tgid and start tag, so it names
 * one kernel of one process; the name is sent once per process as GA_EV_NAME_CHUNK
 * events flagged GA_NAME_UNVERIFIED (a shim's kernel id is the hash of its name,
 * which the agent checks; this one cannot be, and only BPF sets the flag: a
 * kernel_name probe cannot). Its aggregation keys carry GA_AGG_PARCAGPU in
 * graph_flags: the samples' source.
 */
#ifndef GPU_AGENT_PARCAGPU_H
#define GPU_AGENT_PARCAGPU_H

#define GA_PG_PROBE_CORRELATION 0
#define GA_PG_PROBE_KERNEL 1
#define GA_PG_PROBE_PC_BATCH 2
#define GA_PG_PROBE_STALL_MAP 3
#define GA_PG_PROBE_CUBIN 4
#define GA_PG_PROBE_ERROR 5
#define GA_PG_ERROR_LEN 128         /* bytes kept of an error's message and component */
#define GA_PG_PC_BATCH_MAX 128      /* records per pc_sample_batch (parcagpu fires <= 128) */
#define GA_PG_PC_REASONS 64         /* stall reasons kept per PC (CUPTI has about 30) */
#define GA_PG_PC_NAME 512           /* function-name bytes kept, NUL included */
#define GA_PG_CUPTI_PC_BASE 56      /* bytes of CUpti_PCSamplingPCData in every CUPTI */
#define GA_PG_STALL_SLOT 64         /* stall_reason_map's slot size */
#define GA_PG_STALL_MAX 64          /* slots read */
#define GA_PG_MAX_ARGS 8
#define GA_AGG_PARCAGPU 0x4u        /* ga_agg_key.graph_flags: a parcagpu record */
#define GA_NAME_UNVERIFIED 0x1u     /* ga_ev_name_chunk.flags */
#define GA_PG_NAME_CHUNKS 16        /* names longer than 16 chunks are cut */

/* ga_pg_arg.kind */
#define GA_PG_ARG_NONE 0
#define GA_PG_ARG_REG 1             /* the register's value */
#define GA_PG_ARG_MEM 2             /* the memory at register + disp */
#define GA_PG_ARG_IMM 3             /* disp itself */

/* ga_pg_arg.reg: x86-64 registers in this order */
#define GA_PG_REG_NAMES "rax,rbx,rcx,rdx,rsi,rdi,rbp,rsp,r8,r9,r10,r11,r12,r13,r14,r15,rip"
#define GA_PG_NREGS 17

struct ga_pg_arg {
    ga_u64 disp;             /* two's complement */
    ga_u32 kind;
    ga_u32 reg;
    ga_u32 size;             /* 1, 2, 4 or 8 bytes */
    ga_u32 is_signed;        /* sign-extend to 64 bits */
};
struct ga_pg_site_key {
    ga_u32 probe;            /* GA_PG_PROBE_* */
    ga_u32 page_offset;      /* the site's address & 0xfff */
};
struct ga_pg_site {
    ga_u32 nargs;
    ga_u32 pad;
    struct ga_pg_arg args[GA_PG_MAX_ARGS];
};
/* pg_names: (tgid, start tag, name address) of names already sent */
struct ga_pg_name_key {
    ga_u32 tgid;
    ga_u32 start;
    ga_u64 name;
};

/* CUpti_PCSamplingPCData (cupti_pcsampling.h), the part every CUPTI version has;
 * tests/test_contract.py checks it against the real header. */
struct ga_pg_cupti_pc {
    ga_u64 size;             /* the record's size, as CUPTI sets it */
    ga_u64 cubin_crc;
    ga_u64 pc_offset;
    ga_u32 function_index;
    ga_u32 pad;
    ga_u64 function_name;    /* char *, CUPTI's */
    ga_u64 stall_reason_count;
    ga_u64 stall_reason;     /* CUpti_PCSamplingStallReason * */
};
/* CUpti_PCSamplingStallReason */
struct ga_pg_stall {
    ga_u32 index;
    ga_u32 samples;
};
/* GA_EV_PG_PC: one PC record of a parcagpu pc_sample_batch */
struct ga_ev_pg_pc {
    struct ga_event_hdr hdr;
    ga_u32 start;            /* the process's start tag */
    ga_u32 nreasons;         /* reasons[] read */
    ga_u64 cubin_crc;
    ga_u64 pc_offset;
    ga_u32 name_len;         /* name's bytes, NUL excluded */
    ga_u32 reasons_cut;      /* the record had more than GA_PG_PC_REASONS */
    struct ga_pg_stall reasons[GA_PG_PC_REASONS];
    char name[GA_PG_PC_NAME];
};
/* GA_EV_PG_ERROR: a parcagpu error probe */
struct ga_ev_pg_error {
    struct ga_event_hdr hdr;
    ga_u32 code;             /* an int32_t, two's complement */
    ga_u32 pad;
    char message[GA_PG_ERROR_LEN];
    char component[GA_PG_ERROR_LEN];
};
/* GA_EV_PG_NAME: a parcagpu kernel name BPF could not read (its page not resident:
 * BPF cannot fault it in). The agent reads it from /proc/PID/mem while the
 * process's start tag is still `start`, and names kernel_id with it. */
struct ga_ev_pg_name {
    struct ga_event_hdr hdr;
    ga_u32 start;            /* the process's start tag */
    ga_u32 pad;
    ga_u64 kernel_id;
    ga_u64 address;          /* the name, in the process */
};

#endif
