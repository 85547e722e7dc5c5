/* gpu_agent_fire.h: one fire helper per data probe, generated from the probe
 * table (gpu_agent_probes.h):
 *     static inline void ga_fire_<probe>(<its arguments>);
 * Each call site that inlines one becomes one USDT site of that probe, with the
 * table's provider, name, argument order and argument sizes. Used by the shim
 * (through shim/src/ga_probes.h, which first sets the 5-byte nop) and by the test
 * firer (tests/probe_firer). The semaphore probes are not here: attach_probe.cpp
 * defines them with their semaphores. Include <sys/sdt.h> before this. */
#ifndef GPU_AGENT_FIRE_H
#define GPU_AGENT_FIRE_H

#include "gpu_agent_probes.h"

/* STAP_PROBEn takes its arguments one by one: expand the list first. */
#define GA_STAP(n, name, ...) GA_STAP_(n, name, __VA_ARGS__)
#define GA_STAP_(n, name, ...) STAP_PROBE##n(gpu_agent, name, __VA_ARGS__)
#define GA_DEFINE_FIRE(name, n, ...)                                                     \
    static inline __attribute__((always_inline)) void ga_fire_##name(                    \
        GA_MAP(n, GA_ARG_DECL, __VA_ARGS__)) {                                           \
        GA_STAP(n, name, GA_MAP(n, GA_ARG_NAME, __VA_ARGS__));                           \
    }
GA_DATA_PROBE_TABLE(GA_DEFINE_FIRE)
#undef GA_DEFINE_FIRE

#endif
