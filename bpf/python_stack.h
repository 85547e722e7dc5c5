/*
 * python_stack.h: the launching thread's CPython stack, read from BPF.
 *
 * Included by gpu_agent.bpf.c (bcc C). See the "Python stacks" section of
 * shim/include/gpu_agent_probes.h for the contract; the agent side is
 * agent/gpu_agent/symbols/python/ (layout.py computes ga_py_config, symbolize.py
 * names the frames, merge.py splices them into the native stack).
 *
 * No Python code runs and no lock is taken: every read is a
 * bpf_probe_read_user() of the process's memory, which fails cleanly (and
 * ends the walk) on anything unmapped. Thread states and frames are only
 * followed through the interpreter's own lists, every code object is checked
 * against PyCode_Type, and every loop is bounded (no bpf_loop: bcc 0.26 does
 * not relocate its callback).
 *
 * Tunable (cflags): GA_PY_STACK_ENTRIES, GA_PY_PROC_ENTRIES.
 */
#ifndef GA_PYTHON_STACK_H
#define GA_PYTHON_STACK_H

#include "maps.h"

#ifndef GA_PY_STACK_ENTRIES
#define GA_PY_STACK_ENTRIES 4096
#endif
#ifndef GA_PY_PROC_ENTRIES
#define GA_PY_PROC_ENTRIES 4096
#endif

/* Frames the walk may visit: Python frames plus the interpreter's own entry
 * frames (3.12+), which are skipped. */
#define GA_PY_MAX_WALK (GA_PY_MAX_FRAMES + 32)
/* Bytes read per frame, code object and name object (the config's sizes are
 * clamped to these). */
#define GA_PY_BLK 256
#define GA_PY_STR_BLK 64

/* tgid -> layout of its interpreter; written and deleted by the agent. */
BPF_HASH(py_procs, u32, struct ga_py_config, GA_PY_PROC_ENTRIES);
/* (tgid, stack id) -> Python frames; the agent reads it on GA_EV_NEW_STACK. */
BPF_TABLE("lru_hash", struct ga_stack_key, struct ga_py_stack, py_stacks, GA_PY_STACK_ENTRIES);

struct ga_py_scratch {
    struct ga_py_stack st;
    u8 fr[GA_PY_BLK + 8];
    u8 co[GA_PY_BLK + 8];
    u8 str[GA_PY_STR_BLK + 8];
};
BPF_PERCPU_ARRAY(py_scratch, struct ga_py_scratch, 1);

/* A u64 of the process, 0 if unreadable (the helper zeroes it on a fault).
 * Branch-free on purpose, like the frame loop's body: every branch in a
 * bounded loop multiplies the paths the verifier walks per iteration. */
static __always_inline u64 ga_py_rd(u64 addr)
{
    u64 v = 0;
    bpf_probe_read_user(&v, sizeof(v), (const void *)addr);
    return v;
}

/* Fields of a block read into scratch, at offsets the verifier can bound. */
static __always_inline u64 ga_py_u64(const u8 *blk, u32 off)
{
    return *(const u64 *)(blk + (off & (GA_PY_BLK - 1)));
}
static __always_inline u32 ga_py_u32(const u8 *blk, u32 off)
{
    return *(const u32 *)(blk + (off & (GA_PY_BLK - 1)));
}
static __always_inline u8 ga_py_u8(const u8 *blk, u32 off)
{
    return *(blk + (off & (GA_PY_BLK - 1)));
}

/* Read 1..GA_PY_BLK bytes (n) at addr into blk. */
static __always_inline int ga_py_blk(u8 *blk, u32 n, u64 addr)
{
    u32 len = ((n - 1) & (GA_PY_BLK - 1)) + 1;
    return bpf_probe_read_user(blk, len, (const void *)addr);
}

/* The current thread's PyThreadState, or 0. */
static __always_inline u64 ga_py_find_tstate(const struct ga_py_config *cfg, u32 tid)
{
    u64 want;
    u32 off;
    if (cfg->flags & GA_PYC_MATCH_PTHREAD) {
        /* The offset comes from the running kernel's BTF: bcc's headers
         * (task->thread.fsbase) may describe another kernel. */
        u64 task = bpf_get_current_task();
        want = 0;
        bpf_probe_read_kernel(&want, sizeof(want), (const void *)(task + cfg->task_fsbase));
        off = cfg->ts_thread_id;
    } else {
        want = tid;
        if (cfg->pidns_ino) {
            struct bpf_pidns_info ns = {};
            if (bpf_get_ns_current_pid_tgid(cfg->pidns_dev, cfg->pidns_ino, &ns, sizeof(ns)))
                return 0;
            want = ns.pid;
        }
        off = cfg->ts_native_tid;
    }
    if (!want)
        return 0;
    u64 interp = ga_py_rd(cfg->runtime + cfg->rt_interp_head);
    if (!interp)
        return 0;
    u64 ts = ga_py_rd(interp + cfg->interp_threads);
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < GA_PY_MAX_THREADS; i++) {
        if (!ts) {
            /* Next interpreter (subinterpreters). */
            interp = ga_py_rd(interp + cfg->interp_next);
            if (!interp)
                return 0;
            ts = ga_py_rd(interp + cfg->interp_threads);
            continue;
        }
        if (ga_py_rd(ts + off) == want)
            return ts;
        ts = ga_py_rd(ts + cfg->ts_next);
    }
    return 0;
}

/* Walk the launching thread's Python frames into py_scratch and return the
 * stack id to use: native_id itself when there are no Python frames (no
 * config, no thread state, no frame), else native_id mixed with every frame
 * and the frames stored in py_stacks under (tgid, that id). */
static __always_inline u64 ga_py_unwind(u32 tgid, u32 start, u32 tid, u64 native_id)
{
    struct ga_py_config *cfg = py_procs.lookup(&tgid);
    if (!cfg)
        return native_id;
    u32 zero = 0;
    struct ga_py_scratch *sc = py_scratch.lookup(&zero);
    if (!sc)
        return native_id;

    u64 ts = ga_py_find_tstate(cfg, tid);
    if (!ts) {
        count(GA_CNT_PY_NO_THREAD, 1);
        return native_id;
    }
    u64 frame = ga_py_rd(ts + cfg->ts_frame);
    if (frame && (cfg->flags & GA_PYC_CFRAME))
        frame = ga_py_rd(frame + cfg->cframe_frame);

    u32 flags = cfg->flags;
    u32 sflags = 0, bad = 0;
    u64 h = native_id;
    /* Per-mode constants, so the loop body needs no branch on the mode. */
    u32 owner_mode = (flags & GA_PYC_OWNER) ? 1 : 0;
    u32 owner_shim = owner_mode ? cfg->owner_shim : 0x100;     /* never reached */
    u32 all_entry = (flags & GA_PYC_FRAMEOBJ) ? GA_PYF_ENTRY : 0;
    u32 is_entry_mode = (flags & GA_PYC_IS_ENTRY) ? 1 : 0;
    u64 lasti_mask = (flags & GA_PYC_FRAMEOBJ) ? ~0ull : 0;  /* instr = f_lasti * 2 */
    u32 code_off = cfg->co_code;
    /* The frame count lives in the scratch map, not in a register: the
     * verifier then sees the same state at every loop head whatever path the
     * body took, and prunes. */
    sc->st.nframes = 0;
#pragma clang loop unroll(disable)
    for (u32 i = 0; i < GA_PY_MAX_WALK; i++) {
        if (!frame)
            break;
        u32 n = *(volatile u32 *)&sc->st.nframes;
        if (n >= GA_PY_MAX_FRAMES) {
            sflags |= GA_PYS_TRUNCATED;
            break;
        }
        if (ga_py_blk(sc->fr, cfg->fr_size, frame) != 0) {
            bad = 1;
            break;
        }
        u64 prev = ga_py_u64(sc->fr, cfg->fr_previous);
        u32 owner = ga_py_u8(sc->fr, cfg->fr_owner);
        if (owner >= owner_shim) {
            /* The eval loop's entry frame (3.12+): the frame above it (the last
             * one stored) is the outermost of that eval-loop call. */
            sc->st.frames[(n - 1) & (GA_PY_MAX_FRAMES - 1)].flags |= GA_PYF_ENTRY;
            h = (h ^ 0xe) * GA_PY_STAMP_MUL; /* the id covers where runs end */
            frame = prev;
            continue;
        }
        /* is_entry (3.11): owner is that byte, 0 or 1. */
        u32 fflags = all_entry | ((owner & 1) & is_entry_mode);
        u64 code = ga_py_u64(sc->fr, cfg->fr_code) & ~7ull;
        /* Out-of-range offsets (an unstarted frame, a negative f_lasti) are
         * left for the agent to discard: it knows the bytecode's length. */
        u64 lasti2 = (u64)ga_py_u32(sc->fr, cfg->fr_instr) * 2;
        u64 ipoff = ga_py_u64(sc->fr, cfg->fr_instr) - code - code_off;
        u32 instr = (u32)((lasti2 & lasti_mask) | (ipoff & ~lasti_mask));
        /* The code object: its type, first line and name. */
        if (ga_py_blk(sc->co, cfg->co_size, code) != 0 ||
            ga_py_u64(sc->co, 8) != cfg->code_type) {
            bad = 1;
            break;
        }
        u32 firstlineno = ga_py_u32(sc->co, cfg->co_firstlineno);
        u64 name = ga_py_u64(sc->co, cfg->co_name);
        /* Zeroed by the helper if unreadable: then the stamp will not match. */
        u32 sl = ((cfg->str_data + 8 - 1) & (GA_PY_STR_BLK - 1)) + 1;
        bpf_probe_read_user(sc->str, sl, (const void *)name);
        u64 name_len = *(const u64 *)(sc->str + (cfg->str_length & (GA_PY_STR_BLK - 8)));
        u64 name8 = *(const u64 *)(sc->str + (cfg->str_data & (GA_PY_STR_BLK - 8)));
        struct ga_py_frame *pf = &sc->st.frames[n & (GA_PY_MAX_FRAMES - 1)];
        u64 stamp = GA_PY_STAMP(name8, name_len, firstlineno);
        pf->code = code;
        pf->stamp = stamp;
        pf->instr = instr;
        pf->flags = fflags;
        *(volatile u32 *)&sc->st.nframes = n + 1;
        h = (h ^ code) * GA_PY_STAMP_MUL;
        h = (h ^ stamp) * GA_PY_STAMP_MUL;
        h = (h ^ (((u64)fflags << 32) | instr)) * GA_PY_STAMP_MUL;
        frame = prev;
    }
    if (bad) {
        count(GA_DROP_PY_READ, 1);
        sflags |= GA_PYS_TRUNCATED;
    }
    u32 n = *(volatile u32 *)&sc->st.nframes;
    if (frame && n >= GA_PY_MAX_FRAMES)
        sflags |= GA_PYS_TRUNCATED;
    if (n == 0)
        return native_id;

    if (h == 0 || h == native_id)
        h = native_id ^ 0x9e3779b97f4a7c15ull;
    sc->st.flags = sflags;

    struct ga_stack_key sk = {.tgid = tgid, .start = start, .stack_id = h};
    if (!py_stacks.lookup(&sk) && py_stacks.update(&sk, &sc->st) != 0) {
        count(GA_DROP_PY_STACK_FULL, 1);
        return native_id;
    }
    count(GA_CNT_PY_STACKS, 1);
    return h;
}

#endif /* GA_PYTHON_STACK_H */
