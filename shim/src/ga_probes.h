/* ga_probes.h: the one place the shim includes <sys/sdt.h>, and with it the fire
 * helpers generated from the probe table (ga_fire_<probe>, gpu_agent_fire.h).
 *
 * Every probe site is a 5-byte NOP (0f 1f 44 00 00) instead of sdt.h's default
 * 1-byte nop, so a uprobe can be placed on it cheaply and the site is easy to
 * verify with objdump. Only the attach and replay probes have semaphores:
 * attach_probe.cpp includes this with _SDT_HAS_SEMAPHORES set, and gets no fire
 * helpers, so that no data probe carries a semaphore. */
#ifndef GA_PROBES_H
#define GA_PROBES_H

#include <sys/sdt.h>

#undef _SDT_NOP
#define _SDT_NOP .byte 0x0f ; .byte 0x1f ; .byte 0x44 ; .byte 0x00 ; .byte 0x00

#ifndef _SDT_HAS_SEMAPHORES
#include "gpu_agent_fire.h"
#endif

#endif
