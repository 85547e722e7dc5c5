/* launch_cbids.cpp: see launch_cbids.h. */
#include "launch_cbids.h"

#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#define D CUPTI_CB_DOMAIN_DRIVER_API
#define R CUPTI_CB_DOMAIN_RUNTIME_API
#define DRV(n, k) {#n, D, CUPTI_DRIVER_TRACE_CBID_##n, k}
#define RT(n, id, k) {#n, R, CUPTI_RUNTIME_TRACE_CBID_##id, k}

static const struct ga_launch_cbid all_cbids[] = {
    /* driver API */
    DRV(cuLaunch, GA_LK_FUNC),
    DRV(cuLaunchGrid, GA_LK_FUNC),
    DRV(cuLaunchGridAsync, GA_LK_FUNC),
    DRV(cuLaunchKernel, GA_LK_FUNC),
    DRV(cuLaunchKernel_ptsz, GA_LK_FUNC),
    DRV(cuLaunchKernelEx, GA_LK_FUNC_EX),
    DRV(cuLaunchKernelEx_ptsz, GA_LK_FUNC_EX),
    DRV(cuLaunchCooperativeKernel, GA_LK_FUNC),
    DRV(cuLaunchCooperativeKernel_ptsz, GA_LK_FUNC),
    DRV(cuLaunchCooperativeKernelMultiDevice, GA_LK_MULTI_DEVICE),
    DRV(cuGraphLaunch, GA_LK_GRAPH),
    DRV(cuGraphLaunch_ptsz, GA_LK_GRAPH),
    /* runtime API */
    RT(cudaLaunchKernel, cudaLaunchKernel_v7000, GA_LK_FUNC),
    RT(cudaLaunchKernel_ptsz, cudaLaunchKernel_ptsz_v7000, GA_LK_FUNC),
    RT(cudaLaunchKernelExC, cudaLaunchKernelExC_v11060, GA_LK_FUNC_EX),
    RT(cudaLaunchKernelExC_ptsz, cudaLaunchKernelExC_ptsz_v11060, GA_LK_FUNC_EX),
    RT(cudaLaunchCooperativeKernel, cudaLaunchCooperativeKernel_v9000, GA_LK_FUNC),
    RT(cudaLaunchCooperativeKernel_ptsz, cudaLaunchCooperativeKernel_ptsz_v9000, GA_LK_FUNC),
    RT(cudaLaunchCooperativeKernelMultiDevice, cudaLaunchCooperativeKernelMultiDevice_v9000,
       GA_LK_MULTI_DEVICE),
    RT(cudaGraphLaunch, cudaGraphLaunch_v10000, GA_LK_GRAPH),
    RT(cudaGraphLaunch_ptsz, cudaGraphLaunch_ptsz_v10000, GA_LK_GRAPH),
#if CUPTI_API_VERSION >= 130000
    /* CUDA 13 routes `kernel<<<...>>>` through these; their params layout is not
     * published, so they never give a forced first-launch key (launch_key -> 0),
     * only random samples. The driver launch under them is deduplicated as usual.
     * (The runtime entries are enabled only by GPU_AGENT_EXP_CALLBACKS=runtime; by
     * default the driver launch under every runtime launch is what counts.) */
    RT(__cudaLaunchKernel, __cudaLaunchKernel_v13000, GA_LK_FUNC),
    RT(__cudaLaunchKernel_ptsz, __cudaLaunchKernel_ptsz_v13000, GA_LK_FUNC),
#endif
};

#define N_ALL (sizeof(all_cbids) / sizeof(all_cbids[0]))

const struct ga_launch_cbid *const ga_launch_cbids = all_cbids;
const unsigned ga_launch_cbid_count = N_ALL;

bool ga_launch_cbid_omitted(const struct ga_launch_cbid *e) noexcept {
#ifdef GA_OMIT_CBID
#ifdef GA_OMIT_DOMAIN
    if ((unsigned)e->domain != (unsigned)(GA_OMIT_DOMAIN)) return false;
#endif
    return e->cbid == (CUpti_CallbackId)(GA_OMIT_CBID);
#else
    (void)e;
    return false;
#endif
}

const struct ga_launch_cbid *ga_find_launch_cbid(CUpti_CallbackDomain domain,
                                                 CUpti_CallbackId cbid) noexcept {
    for (unsigned i = 0; i < N_ALL; i++) {
        const struct ga_launch_cbid *e = &all_cbids[i];
        if (e->cbid == cbid && e->domain == domain)
            return ga_launch_cbid_omitted(e) ? nullptr : e;
    }
    return nullptr;
}
