/* launch_hook.h: the launch counter that costs nothing a launch (launch_hook.cpp).
 * Compiles on its own: the shim and bench/gpu/launch_hook_probe.cpp both use it. */
#ifndef GA_LAUNCH_HOOK_H
#define GA_LAUNCH_HOOK_H

#include <stdint.h>

#ifndef GA_HIDDEN
#define GA_HIDDEN __attribute__((visibility("hidden")))
#endif

/* What the counter covers so far. */
struct ga_hook_stats {
    uint32_t objects;   /* loaded objects looked at */
    uint32_t slots;     /* their import slots now counted */
    uint32_t targets;   /* distinct functions behind them */
    uint32_t refused;   /* slots left alone (no room, unwritable, unresolved) */
    uint64_t data_bytes; /* writable data searched for driver pointers, in all */
    uint64_t scan_ns;   /* the scans' time, in all */
    uint64_t handouts;  /* trampolines the dlsym stubs answered with, in all */
};

/* Count the launches through every loaded object's imports of the CUDA launch
 * functions (PLT slots), objects loaded since the last call included. The poller's
 * thread only. Returns the number of slots newly counted. */
GA_HIDDEN unsigned ga_hook_scan(void) noexcept;
/* Put every counted slot back as it was (a detach: nothing lingers); how many. */
GA_HIDDEN unsigned ga_hook_restore(void) noexcept;
/* Changes whenever a scan counts more slots: hits on either side of a change are
 * not the same share of the launches (window.cpp calibrates again). Poller only. */
GA_HIDDEN uint64_t ga_hook_epoch(void) noexcept;
/* Calls through the counted slots since the process started: any thread. */
GA_HIDDEN uint64_t ga_hook_hits(void) noexcept;
/* The same, per counted function (GA_HOOK_TARGETS at most), into out; how many. */
#define GA_HOOK_TARGETS 64
GA_HIDDEN uint32_t ga_hook_hits_each(uint64_t *out, uint32_t max) noexcept;
/* Hits or launches a calibration needs, and the kept hits that scale an older
 * coverage (ga_hook_split) need. */
#define GA_HOOK_MIN_HITS 64
/* Hits from `from` to `to` (ga_hook_hits_each's, GA_HOOK_TARGETS each), of all counted
 * functions and of those outside `mask` (bit i: function i): the share of the hits
 * that functions which kept their slots hold scales hits of an older coverage
 * (window.cpp's waiting stretches, shape.cpp's pieces). */
static inline void ga_hook_split(const uint64_t *to, const uint64_t *from, uint64_t mask, double *all,
                                 double *kept) {
    *all = *kept = 0;
    for (unsigned i = 0; i < GA_HOOK_TARGETS; i++) {
        double d = to[i] >= from[i] ? (double)(to[i] - from[i]) : 0;
        *all += d;
        if (!(mask >> i & 1)) *kept += d;
    }
}
/* The counted functions (bit i: ga_hook_hits_each's i) behind the slots counted after
 * the first `slots0` (ga_hook_stats's slots before a scan): which ones a scan grew. */
GA_HIDDEN uint64_t ga_hook_targets_since(uint32_t slots0) noexcept;
GA_HIDDEN ga_hook_stats ga_hook_stats_now(void) noexcept;
/* The counted functions that were called, their objects and hits, into buf (the exit line, the probe's report). */
GA_HIDDEN void ga_hook_describe(char *buf, unsigned size) noexcept;

#endif
