/* unwind.cpp: eh_frame stack unwinding of the calling thread, for the stacks of
 * sampled launches (callbacks.cpp) and of graph kernel nodes (graphs.cpp). It runs
 * on the application's thread inside a CUDA API call: no locks, no allocation.
 * The shim's and libcupti's own leading frames are dropped. */
#include <link.h>
#include <stdint.h>
#include <unwind.h>

#include "ga_internal.h"

/* ---- address ranges whose leading frames are dropped (shim, libcupti) ---- */
struct range { uintptr_t lo, hi; };
static range skip_ranges[2];
static unsigned n_skip_ranges;

struct range_ctx { uintptr_t addr; range r; bool found; };

static int find_range(struct dl_phdr_info *info, size_t, void *arg) {
    range_ctx *c = (range_ctx *)arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    bool in = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr, b = a + ph->p_memsz;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
        if (c->addr >= a && c->addr < b) in = true;
    }
    if (!in) return 0;
    c->r.lo = lo;
    c->r.hi = hi;
    c->found = true;
    return 1;
}

static void add_range_of(const void *addr) {
    range_ctx c;
    c.addr = (uintptr_t)addr;
    c.found = false;
    if (addr && dl_iterate_phdr(find_range, &c) && c.found && n_skip_ranges < 2)
        skip_ranges[n_skip_ranges++] = c.r;
}

void ga_compute_skip_ranges(void) noexcept {
    if (n_skip_ranges) return;
    add_range_of((const void *)&ga_api_callback);
    add_range_of((const void *)ga_cupti.Subscribe);
    /* The driver's frames stay: the callback fires in the driver's launch entry,
     * and its name (cuLaunchKernel, cuGraphLaunch, ...) says how the kernel was
     * launched, under libcudart's frames for a runtime launch. */
}

static inline bool in_skip_range(uintptr_t ip) {
    for (unsigned i = 0; i < n_skip_ranges; i++)
        if (ip >= skip_ranges[i].lo && ip < skip_ranges[i].hi) return true;
    return false;
}

/* ---- unwinding ---- */
struct unwind_state {
    uint64_t *frames;
    unsigned n;
    bool skipping;
};

static _Unwind_Reason_Code unwind_cb(struct _Unwind_Context *ctx, void *arg) {
    unwind_state *u = (unwind_state *)arg;
    uintptr_t ip = _Unwind_GetIP(ctx);
    if (!ip) return _URC_END_OF_STACK;
    if (u->skipping) {
        if (in_skip_range(ip)) return _URC_NO_REASON;
        u->skipping = false;
    }
    u->frames[u->n++] = ip;
    return u->n >= GA_MAX_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static uint64_t hash_stack(const uint64_t *f, unsigned n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
    for (unsigned i = 0; i < n; i++) {
        h ^= f[i];
        h *= 0x100000001b3ULL;
        h = (h << 29) | (h >> 35);
    }
    h = ga_fmix64(h);
    return h ? h : 1;
}

uint32_t ga_unwind(uint64_t *frames, uint64_t *stack_id) noexcept {
    unwind_state u;
    u.frames = frames;
    u.n = 0;
    u.skipping = true;
    _Unwind_Backtrace(unwind_cb, &u);
    *stack_id = hash_stack(frames, u.n);
    return u.n;
}
