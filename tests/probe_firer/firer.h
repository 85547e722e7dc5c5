#ifndef FIRER_H
#define FIRER_H
#include "gpu_agent_probes.h"
/* firer_<probe>(its arguments), for every data probe of the table (probes.c) */
#define FIRER_DECL(name, n, ...) void firer_##name(GA_MAP(n, GA_ARG_DECL, __VA_ARGS__));
GA_DATA_PROBE_TABLE(FIRER_DECL)
#undef FIRER_DECL
void firer_correlation_alt(ga_u32, ga_u32, ga_u64, const ga_u64 *, ga_u32, ga_u32);
void firer_attach(void);
void firer_replay(void);
unsigned short firer_semaphore(void);
#endif
