/* The `attach` probe with its semaphore, in its own translation unit:
 * _SDT_HAS_SEMAPHORES makes every probe of a unit reference a semaphore. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include "gpu_agent_probes.h"
#include "firer.h"

__extension__ unsigned short gpu_agent_attach_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short gpu_agent_replay_semaphore
    __attribute__((unused)) __attribute__((section(".probes")));
/* Exported like the shim's: the agent refuses a library of another version. */
__attribute__((visibility("default"))) const unsigned int gpu_agent_contract_version =
    GA_CONTRACT_VERSION;

__attribute__((noinline)) void firer_attach(void)
{
    STAP_PROBE(gpu_agent, attach);
}

/* The contract's replay-request probe: present, never fired by the firer. */
__attribute__((noinline)) void firer_replay(void)
{
    STAP_PROBE(gpu_agent, replay);
}

unsigned short firer_semaphore(void)
{
    return *(volatile unsigned short *)&gpu_agent_attach_semaphore;
}
