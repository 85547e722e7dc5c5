/* subscription.cpp: what of CUPTI the shim holds, and its switches, which
 * collection.cpp throws (subscription.h): the subscription (again after every
 * teardown; named "gpu-agent", never shared, and the name of the client that holds
 * CUPTI when it is refused), the launch callbacks, and kernel activity, with what
 * each switch stalls the process (budget.cpp). Poller thread only. */
#include <stddef.h>

#include "ga_internal.h"
#include "launch_cbids.h"
#include "subscription.h"

ga_sub_state ga_sub;
/* The window edges' activity switches (debug statistics): what they cost. */
static uint64_t g_enable_ns, g_enable_max_ns, g_disable_ns, g_disable_max_ns, g_n_enable, g_n_disable;

/* The client that held CUPTI when the last subscription failed, as CUPTI names it
 * (cuptiSubscribe_v2; "" before CUDA 13). */
static char g_holder[64];

/* Named, and with CUDA 13.3's multi-subscriber mode refused (allowMultipleSubscribers
 * 0): beside another subscriber, cuptiFinalize does nothing, so CUPTI's cost would
 * stay after every window and after the detach. So the shim never shares CUPTI; it
 * waits for the other client to let go, and says which it is. */
static CUptiResult subscribe(CUpti_SubscriberHandle *sub) {
    if (!ga_cupti.SubscribeV2) return ga_cupti.Subscribe(sub, (CUpti_CallbackFunc)ga_api_callback, nullptr);
    uint32_t ver = 0;
    if (ga_cupti.GetVersion) ga_cupti.GetVersion(&ver);
    char old[64] = "";
    ga_subscriber_params p = {};
    /* only a CUPTI of 13.3 or newer reads the last field */
    p.struct_size = ver >= 130300 ? offsetof(ga_subscriber_params, allow_multiple_subscribers) + 1
                                  : offsetof(ga_subscriber_params, allow_multiple_subscribers);
    p.subscriber_name = "gpu-agent";
    p.old_subscriber_name = old;
    p.old_subscriber_size = sizeof old;
    p.allow_multiple_subscribers = 0;
    CUptiResult r = ga_cupti.SubscribeV2(sub, (CUpti_CallbackFunc)ga_api_callback, nullptr, &p);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        size_t n = 0; /* printable only: it goes to the process's stderr */
        for (; n + 1 < sizeof g_holder && old[n]; n++) g_holder[n] = old[n] >= 0x20 && old[n] < 0x7f ? old[n] : '?';
        g_holder[n] = 0;
    }
    return r;
}

const char *ga_collect_holder(void) noexcept { return g_holder[0] ? g_holder : "another CUPTI client"; }

/* Subscribe (again, after a teardown): activity buffers, the subscription, and
 * the graph callbacks, which stay on between windows (graphs captured then keep
 * their capture stacks; no launch pays for them). The launch callbacks come on
 * with a count phase or a window. (Blackwell's hardware tracing,
 * cuptiActivityEnableHWTrace, would be enabled here once, before the first
 * subscription: it cannot be disabled, so such a process would not be torn down.
 * Not used: untested without a Blackwell GPU.) */
CUptiResult ga_sub_up(const char **what) noexcept {
    uint64_t t0 = ga_now_ns();
    CUptiResult r = ga_cupti.ActivityRegisterCallbacks(ga_buffer_requested, ga_buffer_completed);
    if (r != CUPTI_SUCCESS) {
        *what = "cuptiActivityRegisterCallbacks";
        return r;
    }
    r = subscribe(&ga_sub.handle);
    if (r != CUPTI_SUCCESS) {
        ga_sub.handle = nullptr;
        *what = "cuptiSubscribe";
        return r;
    }
    /* Graph capture stacks (graphs.cpp): only with cuptiGetGraphNodeId, the id
     * kernel records carry. A CUPTI without these callbacks just loses them. */
    ga_sub.graph_cbs = false;
    if (ga_cupti.GetGraphNodeId) {
        ga_sub.graph_cbs = true;
        for (unsigned i = 0; i < ga_graph_cbid_count; i++) {
            r = ga_cupti.EnableCallback(1, ga_sub.handle, CUPTI_CB_DOMAIN_RESOURCE, ga_graph_cbids[i]);
            if (r != CUPTI_SUCCESS)
                ga_debug("resource callback %u not enabled: %s", (unsigned)ga_graph_cbids[i],
                         ga_cupti_err(r));
        }
    }
    ga_sub.cbids_on = false;
    ga_sub.enables = 0; /* after a finalize, or the first subscription */
    ga_teardown_live();
    ga_budget_note_stall(ga_now_ns() - t0, false);
    return CUPTI_SUCCESS;
}

/* Launch callbacks on or off. Unsupported ids (an older CUPTI) are skipped.
 * Only the driver domain's: every runtime launch calls a driver launch, which
 * fires its own callback with the same correlation id, so the driver domain alone
 * sees every launch once, at half the callbacks of both domains. On the H200 the
 * runtime domain on top cost eager PyTorch about 2 points (+3.4 % against +1.3 %,
 * medians of four in-process A/B runs each), and its per-thread
 * deduplication miscounted CUDA 13's launches (in-window launch counts 1.4-2.2x
 * the kernel records, against 1.0006x with the driver domain alone). */
CUptiResult ga_sub_launch_cbids(bool on, bool keep_graphs) noexcept {
    for (unsigned i = 0; i < ga_launch_cbid_count; i++) {
        const ga_launch_cbid *e = &ga_launch_cbids[i];
        if (ga_launch_cbid_omitted(e) || (keep_graphs && e->kind == GA_LK_GRAPH)) continue;
        if (!GA_EXP(cb_runtime) && e->domain != CUPTI_CB_DOMAIN_DRIVER_API) continue;
        CUptiResult r = ga_cupti.EnableCallback(on ? 1 : 0, ga_sub.handle, e->domain, e->cbid);
        if (r == CUPTI_ERROR_INVALID_PARAMETER) {
            if (on) ga_debug("callback %s (%u) not supported by this CUPTI", e->name, (unsigned)e->cbid);
            continue;
        }
        if (r != CUPTI_SUCCESS && on) return r;
    }
    if (on && !ga_sub.cbids_on) ga_sub.enables++;
    ga_sub.cbids_on = on;
    ga_window_callbacks(on, ga_now_ns());
    return CUPTI_SUCCESS;
}

/* Kernel activity (CONCURRENT_KERNEL) on or off, timed: the driver holds the
 * process's launches while it switches. */
CUptiResult ga_sub_activity(bool on, const char **what) noexcept {
    if (on == ga_sub.activity_on) return CUPTI_SUCCESS;
    uint64_t t0 = ga_now_ns();
    CUptiResult r = on ? ga_cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                       : ga_cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    uint64_t dt = ga_now_ns() - t0;
    ga_budget_note_stall(dt, false);
    uint64_t &sum = on ? g_enable_ns : g_disable_ns, &max = on ? g_enable_max_ns : g_disable_max_ns;
    sum += dt, (on ? g_n_enable : g_n_disable)++;
    if (dt > max) max = dt;
    if (!on) { /* off whether or not CUPTI said so */
        ga_sub.activity_on = false;
        ga_exp_internal_activity(false);
    }
    if (r != CUPTI_SUCCESS) {
        *what = on ? "cuptiActivityEnable(CONCURRENT_KERNEL)" : "cuptiActivityDisable(CONCURRENT_KERNEL)";
        return r;
    }
    if (on) {
        ga_sub.activity_on = ga_sub.activity_used = ga_sub.records_held = true;
        ga_exp_internal_activity(true);
    }
    return CUPTI_SUCCESS;
}

ga_sub_edges ga_sub_edge_stats(void) noexcept {
    ga_sub_edges e;
    e.enable_mean_us = g_n_enable ? (double)g_enable_ns / (double)g_n_enable / 1e3 : 0.0;
    e.enable_max_us = (double)g_enable_max_ns / 1e3;
    e.disable_mean_us = g_n_disable ? (double)g_disable_ns / (double)g_n_disable / 1e3 : 0.0;
    e.disable_max_us = (double)g_disable_max_ns / 1e3;
    return e;
}
