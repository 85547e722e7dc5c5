/* Data probes of the test firer: the contract's provider, names and argument
 * order, fired with whatever the test script says (including corrupt input).
 * No semaphores here: only `attach` has one (see attach.c). */
#include <sys/sdt.h>
#include "gpu_agent_probes.h"
#include "firer.h"

__attribute__((noinline)) void firer_correlation(ga_u32 corr, ga_u32 cbid, ga_u64 stack_id,
                                                 const ga_u64 *frames, ga_u32 nframes,
                                                 ga_u32 weight, ga_u64 launch_ns)
{
    /* launch_ns 0 (the default): no latency sample, no join-lag check */
    STAP_PROBE7(gpu_agent, cuda_correlation, corr, cbid, stack_id, frames, nframes, weight,
                launch_ns);
}

/* A second site of the same probe: the real shim may inline a probe in
 * several places, and each site must be attached with its own arg specs. */
__attribute__((noinline)) void firer_correlation_alt(ga_u32 corr, ga_u32 cbid, ga_u64 stack_id,
                                                     const ga_u64 *frames, ga_u32 nframes,
                                                     ga_u32 weight)
{
    volatile ga_u64 sid = stack_id; /* different register allocation than site 1 */
    STAP_PROBE7(gpu_agent, cuda_correlation, corr, cbid, sid, frames, nframes, weight, (ga_u64)0);
}

__attribute__((noinline)) void firer_batch(const struct ga_kernel_record *recs, ga_u32 count,
                                           ga_u32 record_size, ga_u32 dropped)
{
    STAP_PROBE4(gpu_agent, kernel_batch, recs, count, record_size, dropped);
}

__attribute__((noinline)) void firer_name(ga_u64 kernel_id, ga_u32 total_len, ga_u32 offset,
                                          const char *chunk, ga_u32 chunk_len)
{
    STAP_PROBE5(gpu_agent, kernel_name, kernel_id, total_len, offset, chunk, chunk_len);
}

__attribute__((noinline)) void firer_node_stack(ga_u64 node_id, ga_u64 stack_id,
                                                const ga_u64 *frames, ga_u32 nframes)
{
    STAP_PROBE4(gpu_agent, graph_node_stack, node_id, stack_id, frames, nframes);
}

__attribute__((noinline)) void firer_node_cloned(ga_u64 orig, ga_u64 node_id)
{
    STAP_PROBE2(gpu_agent, graph_node_cloned, orig, node_id);
}

__attribute__((noinline)) void firer_node_destroyed(ga_u64 node_id)
{
    STAP_PROBE1(gpu_agent, graph_node_destroyed, node_id);
}
