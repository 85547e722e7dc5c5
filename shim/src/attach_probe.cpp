/* attach_probe.cpp: the gpu_agent:attach probe and its semaphore.
 *
 * This is the only translation unit compiled with _SDT_HAS_SEMAPHORES, so the
 * only probe whose .note.stapsdt entry carries a semaphore address. The agent
 * attaches a uprobe with ref_ctr_offset = the semaphore's file offset; the
 * kernel then increments the semaphore in every process that maps the shim
 * (and decrements it when the uprobe goes away). The shim polls it. */
#define _SDT_HAS_SEMAPHORES 1
#include "ga_probes.h"
#include "ga_internal.h"

extern "C" {
/* Visible in .dynsym and .symtab so the agent can find it by name. */
__extension__ unsigned short gpu_agent_attach_semaphore __attribute__((unused))
    __attribute__((section(".probes"))) __attribute__((visibility("default")));

__extension__ unsigned short gpu_agent_replay_semaphore __attribute__((unused))
    __attribute__((section(".probes"))) __attribute__((visibility("default")));

/* Hidden aliases: reads go to THIS object's semaphores even if another copy of
 * the shim in the process exports the same names first in symbol lookup. */
extern unsigned short ga_attach_semaphore_local
    __attribute__((alias("gpu_agent_attach_semaphore"), visibility("hidden")));
extern unsigned short ga_replay_semaphore_local
    __attribute__((alias("gpu_agent_replay_semaphore"), visibility("hidden")));
}

/* An agent that started asks for the names (gpu_agent_probes.h, `replay`). */
unsigned ga_replay_semaphore_value(void) noexcept {
    return *(volatile unsigned short *)&ga_replay_semaphore_local;
}

/* Fired after a replay that an agent asked for. */
__attribute__((noinline)) void ga_fire_replay_probe(void) noexcept {
    STAP_PROBE(gpu_agent, replay);
}

unsigned ga_semaphore_value(void) noexcept {
#ifdef GA_TEST_FORCE_ATTACH
    /* Test builds only (tests/test_hot_path.py): attached with no agent, so that
     * callgrind, which cannot run a process with uprobes in it, can count the
     * attached launch path. */
    return 1;
#endif
    return *(volatile unsigned short *)&ga_attach_semaphore_local;
}

/* Fired on every IDLE -> ATTACHED transition (no arguments). noinline keeps
 * exactly one probe site. */
__attribute__((noinline)) void ga_fire_attach_probe(void) noexcept {
    STAP_PROBE(gpu_agent, attach);
}
