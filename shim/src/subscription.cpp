/* subscription.cpp: the shim's CUPTI subscription (collection.cpp subscribes
 * again after every teardown): named "gpu-agent", never shared, and the name of
 * the client that holds CUPTI when it is refused. */
#include <stddef.h>

#include "ga_internal.h"

/* The client that held CUPTI when the last subscription failed, as CUPTI names it
 * (cuptiSubscribe_v2; "" before CUDA 13). */
static char g_holder[64];

/* Named, and with CUDA 13.3's multi-subscriber mode refused (allowMultipleSubscribers
 * 0): beside another subscriber, cuptiFinalize does nothing, so CUPTI's cost would
 * stay after every window and after the detach. So the shim never shares CUPTI; it
 * waits for the other client to let go, and says which it is. */
CUptiResult ga_cupti_subscribe(CUpti_SubscriberHandle *sub) noexcept {
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
