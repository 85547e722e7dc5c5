/* parcagpu.h: parcagpu's probes, a second source of kernels. The contract is in gpu_agent_parcagpu.h: the agent stores
 * each registered site's argument specs in pg_sites; these programs read the
 * arguments from what the specs name, keep the launching thread's stack at
 * cuda_correlation, and add each kernel_executed record to the same maps as a
 * shim's records, under a kernel id of its name's address (pg_kernel_id) and with
 * GA_AGG_PARCAGPU in graph_flags. Its PC sampling probes: parcagpu_pc.h. */
#ifndef GA_BPF_PARCAGPU_H
#define GA_BPF_PARCAGPU_H

#include "maps.h"
#include "stacks.h"
#include "aggregate.h"
#include "procs.h"


BPF_HASH(pg_sites, struct ga_pg_site_key, struct ga_pg_site, 4096); /* parcagpu.py's MAX_SITES */
/* Names already sent, per process: CUPTI keeps one name string per function. */
BPF_TABLE("lru_hash", struct ga_pg_name_key, u32, pg_names, 65536);
struct pg_name_buf {
    char data[GA_PG_NAME_CHUNKS * GA_NAME_CHUNK + 1];
};
BPF_PERCPU_ARRAY(pg_name_scratch, struct pg_name_buf, 1);

/* The registers argument specs name (GA_PG_REG_NAMES order), copied once per
 * probe: a switch on the register would load through a computed ctx pointer,
 * which the verifier refuses. */
struct pg_regs {
    u64 r[GA_PG_NREGS];
};

static __always_inline void pg_regs(struct pt_regs *ctx, struct pg_regs *g)
{
    g->r[0] = ctx->ax;
    g->r[1] = ctx->bx;
    g->r[2] = ctx->cx;
    g->r[3] = ctx->dx;
    g->r[4] = ctx->si;
    g->r[5] = ctx->di;
    g->r[6] = ctx->bp;
    g->r[7] = ctx->sp;
    g->r[8] = ctx->r8;
    g->r[9] = ctx->r9;
    g->r[10] = ctx->r10;
    g->r[11] = ctx->r11;
    g->r[12] = ctx->r12;
    g->r[13] = ctx->r13;
    g->r[14] = ctx->r14;
    g->r[15] = ctx->r15;
    g->r[16] = ctx->ip;
}

static __always_inline u64 pg_reg(struct pg_regs *g, u32 reg)
{
    return reg < GA_PG_NREGS ? g->r[reg] : 0;
}

/* Argument i of the probe that fired, as its spec says; 0 if it could be read. */
static __always_inline int pg_arg(struct pg_regs *ctx, struct ga_pg_site *site, u32 i, u64 *out)
{
    if (i >= GA_PG_MAX_ARGS || i >= site->nargs)
        return -1;
    struct ga_pg_arg *a = &site->args[i];
    u64 v = 0;
    if (a->kind == GA_PG_ARG_IMM) {
        v = a->disp;
    } else if (a->kind == GA_PG_ARG_REG) {
        v = pg_reg(ctx, a->reg);
    } else if (a->kind == GA_PG_ARG_MEM) {
        u64 addr = pg_reg(ctx, a->reg) + a->disp;
        long err;
        switch (a->size) {
        case 1: err = bpf_probe_read_user(&v, 1, (void *)addr); break;
        case 2: err = bpf_probe_read_user(&v, 2, (void *)addr); break;
        case 4: err = bpf_probe_read_user(&v, 4, (void *)addr); break;
        default: err = bpf_probe_read_user(&v, 8, (void *)addr); break;
        }
        if (err)
            return -1;
    } else {
        return -1;
    }
    switch (a->size) {
    case 1: v = a->is_signed ? (u64)(s64)(s8)v : (u64)(u8)v; break;
    case 2: v = a->is_signed ? (u64)(s64)(s16)v : (u64)(u16)v; break;
    case 4: v = a->is_signed ? (u64)(s64)(s32)v : (u64)(u32)v; break;
    }
    *out = v;
    return 0;
}

/* The process's start tag; the agent hears of a process new to BPF (a parcagpu
 * process fires no `attach`) and sets up its Python stacks, as at a shim's attach. */
static __always_inline u32 pg_see_proc(u32 tgid)
{
    u32 *known = procs.lookup(&tgid);
    if (known)
        return *known;
    u32 start = see_proc(tgid);
    emit_proc_attach(tgid);
    return start;
}

/* The first n arguments of the probe that fired (n <= GA_PG_MAX_ARGS, a constant
 * at each call), as its site's specs say; 0, or -1 counted as a drop when the
 * site is unknown or an argument cannot be read. */
static __always_inline int pg_args(struct pt_regs *ctx, u32 probe, u32 n, u64 *a)
{
    struct ga_pg_site_key k = {.probe = probe, .page_offset = (u32)(PT_REGS_IP(ctx) & 0xfff)};
    struct ga_pg_site *site = pg_sites.lookup(&k);
    struct pg_regs g;
    pg_regs(ctx, &g);
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < GA_PG_MAX_ARGS; i++) {
        if (i < n && (!site || pg_arg(&g, site, i, &a[i]))) {
            count(GA_DROP_PG_ARGS, 1);
            return -1;
        }
    }
    return 0;
}

/* ---- cuda_correlation(u32 correlationId, int signedCbid, const char *name) ----
 * The launching thread's stack: its native frames as the kernel walks them
 * (frame pointers), its Python frames (ga_py_unwind), and the correlation id's
 * join, as a shim's cuda_correlation does (weight 1: every kernel parcagpu
 * passes on has its correlation). */
int ga_pg_cuda_correlation(struct pt_regs *ctx)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    count(GA_CNT_PG_CORRELATIONS, 1);
    u64 a[2] = {};
    if (pg_args(ctx, GA_PG_PROBE_CORRELATION, 2, a))
        return 0;
    u64 corr = a[0], cbid = a[1];
    count(GA_CNT_SAMPLES, 1);
    u32 start = pg_see_proc(tgid);
    u32 zero = 0;
    struct ga_stack *s = stack_scratch.lookup(&zero);
    if (!s)
        return 0;
    long got = bpf_get_stack(ctx, s->ips, sizeof(s->ips), BPF_F_USER_STACK);
    u32 nframes = got > 0 ? (u32)got / 8 : 0;
    u64 h = 0xcbf29ce484222325ULL;
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < GA_MAX_FRAMES; i++) {
        if (i < nframes)
            h = (h ^ s->ips[i]) * 0x100000001b3ULL;
    }
    h = h ? h : 1;
    u64 stack_id = ga_py_unwind(tgid, start, (u32)pid_tgid, h);
    struct ga_stack_key sk = {.tgid = tgid, .start = start, .stack_id = stack_id};
    if (!stacks.lookup(&sk)) {
        s->nframes = nframes;
        s->cbid = (u32)cbid;
        announce_stack(tgid, start, stack_id, s);
    }
    struct ga_corr_key ck = {.tgid = tgid, .correlation_id = (u32)corr, .start = start, .pad = 0};
    struct ga_corr_val cv = {.stack_id = stack_id, .weight = 1, .cbid = (u32)cbid,
                             .launch_ns = 0, .tid = (u32)pid_tgid, .pad = 0};
    corr_stacks.update(&ck, &cv);
    return 0;
}

/* One kernel of one process: its name's address mixed with the process's tgid and
 * start tag (splitmix64's finalizer), never 0. */
static __always_inline u64 pg_kernel_id(u32 tgid, u32 start, u64 name)
{
    u64 x = name ^ (((u64)tgid << 32) | start);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x ? x : 1;
}

/* A name BPF could not read (a page not resident: BPF cannot fault it in): the
 * agent reads it (GA_EV_PG_NAME), once per process and name; if the event finds no
 * room, the next record tries again. */
static __always_inline void pg_name_unread(u32 tgid, u32 start, u64 name, u64 kernel_id,
                                           struct ga_pg_name_key *nk)
{
    struct ga_ev_pg_name *ev = events.ringbuf_reserve(sizeof(*ev));
    if (!ev) {
        count(GA_DROP_RINGBUF_FULL, 1);
        pg_names.delete(nk);
        return;
    }
    ev->hdr.type = GA_EV_PG_NAME;
    ev->hdr.tgid = tgid;
    ev->start = start;
    ev->pad = 0;
    ev->kernel_id = kernel_id;
    ev->address = name;
    events.ringbuf_submit(ev, 0);
}

/* A kernel name, once per process: read whole into the scratch first (its length
 * is in the first chunk holding its NUL), then sent as GA_EV_NAME_CHUNK events. */
static __always_inline void pg_send_name(u32 tgid, u32 start, u64 name, u64 kernel_id)
{
    struct ga_pg_name_key nk = {.tgid = tgid, .start = start, .name = name};
    u32 one = 1;
    if (pg_names.insert(&nk, &one) != 0)
        return; /* sent already (or the table is busy: the next record sends it) */
    u32 zero = 0;
    struct pg_name_buf *buf = pg_name_scratch.lookup(&zero);
    if (!buf)
        return;
    /* A chunk is read with one byte more than it holds: the helper always ends
     * what it copies with a NUL, so a full chunk reads as GA_NAME_CHUNK + 1 (its
     * NUL lands on the next chunk's first byte, which the next read overwrites). */
    u32 total = 0, done = 0;
#pragma clang loop unroll(disable)
    for (u32 c = 0; c < GA_PG_NAME_CHUNKS; c++) {
        if (!done) {
            long n = bpf_probe_read_user_str(buf->data + c * GA_NAME_CHUNK, GA_NAME_CHUNK + 1,
                                             (void *)(name + c * GA_NAME_CHUNK));
            if (n <= 0) {
                done = 1;
                if (c == 0) {
                    pg_name_unread(tgid, start, name, kernel_id, &nk);
                    return;
                }
            } else if (n <= GA_NAME_CHUNK) {
                total = c * GA_NAME_CHUNK + (u32)n - 1; /* n counts the NUL */
                done = 1;
            } else {
                total = (c + 1) * GA_NAME_CHUNK; /* no NUL yet: longer names are cut */
            }
        }
    }
#pragma clang loop unroll(disable)
    for (u32 c = 0; c < GA_PG_NAME_CHUNKS; c++) {
        if (c * GA_NAME_CHUNK < total) {
            struct ga_ev_name_chunk *ev = events.ringbuf_reserve(sizeof(*ev));
            if (!ev) {
                count(GA_DROP_RINGBUF_FULL, 1);
                pg_names.delete(&nk); /* the next record tries again */
                return;
            }
            u32 len = total - c * GA_NAME_CHUNK;
            len = len > GA_NAME_CHUNK ? GA_NAME_CHUNK : len;
            ev->hdr.type = GA_EV_NAME_CHUNK;
            ev->hdr.tgid = tgid;
            ev->kernel_id = kernel_id;
            ev->total_len = total;
            ev->offset = c * GA_NAME_CHUNK;
            ev->len = len;
            ev->flags = GA_NAME_UNVERIFIED;
            __builtin_memcpy(ev->data, buf->data + c * GA_NAME_CHUNK, GA_NAME_CHUNK);
            events.ringbuf_submit(ev, 0);
            count(GA_CNT_NAME_CHUNKS, 1);
        }
    }
}

/* ---- kernel_executed(u64 start, u64 end, u32 correlationId, u32 deviceId,
 *                      u32 streamId, u32 graphId, u64 graphNodeId, const char *name) ---- */
int ga_pg_kernel_executed(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    count(GA_CNT_PG_KERNELS, 1);
    u64 a[8] = {};
    if (pg_args(ctx, GA_PG_PROBE_KERNEL, 8, a))
        return 0;
    u64 name = a[7];
    if (!name) {
        count(GA_DROP_BAD_RECORD, 1);
        return 0;
    }
    u32 start = pg_see_proc(tgid);
    u64 kernel_id = pg_kernel_id(tgid, start, name);
    pg_send_name(tgid, start, name, kernel_id);
    struct batch_ctx bc = {.recs = 0, .tgid = tgid, .count = 1, .start = start, .trace = 0};
    if (batch_maps(&bc, current_gen()) != 0) {
        count(GA_DROP_AGG_FULL, 1);
        return 0;
    }
    u64 ns = a[1] - a[0];
    if (a[1] < a[0] || ns > GA_MAX_KERNEL_NS) {
        count(GA_DROP_IMPOSSIBLE, 1);
        return 0;
    }
    /* As kernel_batch adds a shim's record (batch_one), less what parcagpu does not
     * give: graph nodes' capture stacks, window weights, launch times. */
    struct ga_agg_key k = {};
    k.tgid = tgid;
    k.device_id = (u32)a[3];
    k.stream_id = (u32)a[4];
    k.graph_id = (u32)a[5];
    k.kernel_id = kernel_id;
    k.graph_flags = GA_AGG_PARCAGPU;
    k.start = start;
    if (agg_add(bc.totals, &k, ns, 1) != 0)
        return 0;
    count(GA_CNT_KERNELS, 1);
    struct ga_corr_key ck = {.tgid = tgid, .correlation_id = (u32)a[2], .start = start, .pad = 0};
    struct ga_corr_val *cv = corr_stacks.lookup(&ck);
    if (!cv) {
        count(GA_CNT_UNSAMPLED, 1);
        return 0;
    }
    k.stack_id = cv->stack_id;
    agg_add(bc.sampled, &k, ns, cv->weight);
    return 0;
}

#endif /* GA_BPF_PARCAGPU_H */
