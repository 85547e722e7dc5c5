/* launch_cbids.h: the one table of CUPTI callback ids the shim subscribes to.
 *
 * Kept tiny and separate on purpose: a test can rebuild the shim with
 * -DGA_OMIT_CBID=<cbid> (and optionally -DGA_OMIT_DOMAIN=<1 driver|2 runtime>)
 * to drop one entry and prove that some test then fails. */
#ifndef GA_LAUNCH_CBIDS_H
#define GA_LAUNCH_CBIDS_H

#include <cupti.h>

enum ga_launch_kind {
    GA_LK_FUNC = 0,      /* params start with a CUfunction / host func pointer */
    GA_LK_FUNC_EX,       /* cuLaunchKernelEx / cudaLaunchKernelExC: config first */
    GA_LK_MULTI_DEVICE,  /* launchParamsList[0].function */
    GA_LK_GRAPH,         /* hGraphExec */
};

struct ga_launch_cbid {
    const char *name;
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    enum ga_launch_kind kind;
};

/* The full table, in a fixed order. An entry for which ga_launch_cbid_omitted()
 * is true (GA_OMIT_CBID) is never enabled and never handled. */
extern const struct ga_launch_cbid *const ga_launch_cbids __attribute__((visibility("hidden")));
extern const unsigned ga_launch_cbid_count __attribute__((visibility("hidden")));

bool ga_launch_cbid_omitted(const struct ga_launch_cbid *e) noexcept
    __attribute__((visibility("hidden")));

/* Returns the (non-omitted) table entry for (domain, cbid) or NULL. */
const struct ga_launch_cbid *ga_find_launch_cbid(CUpti_CallbackDomain domain,
                                                 CUpti_CallbackId cbid) noexcept
    __attribute__((visibility("hidden")));

#endif
