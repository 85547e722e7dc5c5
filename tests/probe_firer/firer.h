#ifndef FIRER_H
#define FIRER_H
#include "gpu_agent_probes.h"
void firer_correlation(ga_u32, ga_u32, ga_u64, const ga_u64 *, ga_u32, ga_u32, ga_u64);
void firer_correlation_alt(ga_u32, ga_u32, ga_u64, const ga_u64 *, ga_u32, ga_u32);
void firer_batch(const struct ga_kernel_record *, ga_u32, ga_u32, ga_u32);
void firer_name(ga_u64, ga_u32, ga_u32, const char *, ga_u32);
void firer_node_stack(ga_u64, ga_u64, const ga_u64 *, ga_u32);
void firer_node_cloned(ga_u64, ga_u64);
void firer_node_destroyed(ga_u64);
void firer_attach(void);
void firer_replay(void);
unsigned short firer_semaphore(void);
#endif
