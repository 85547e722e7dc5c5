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
 *       once per kernel record it passes on.
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

#endif
