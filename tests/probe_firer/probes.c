/* Data probes of the test firer, generated from the contract's probe table
 * (GA_DATA_PROBE_TABLE, through the same fire helpers the shim uses): one
 * firer_<probe>() per probe, fired with whatever the test script says (including
 * corrupt input). No semaphores here: only `attach` and `replay` have them (see
 * attach.c). */
#include <sys/sdt.h>
#include "gpu_agent_fire.h"
#include "firer.h"

#define FIRER(name, n, ...)                                                            \
    __attribute__((noinline)) void firer_##name(GA_MAP(n, GA_ARG_DECL, __VA_ARGS__)) { \
        ga_fire_##name(GA_MAP(n, GA_ARG_NAME, __VA_ARGS__));                           \
    }
GA_DATA_PROBE_TABLE(FIRER)

/* A second site of the same probe: the real shim may inline a probe in
 * several places, and each site must be attached with its own arg specs. */
__attribute__((noinline)) void firer_correlation_alt(ga_u32 corr, ga_u32 cbid, ga_u64 stack_id,
                                                     const ga_u64 *frames, ga_u32 nframes,
                                                     ga_u32 weight)
{
    volatile ga_u64 sid = stack_id; /* different register allocation than site 1 */
    ga_fire_cuda_correlation(corr, cbid, sid, frames, nframes, weight, 0);
}
