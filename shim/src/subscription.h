/* subscription.h: what of CUPTI the shim holds now (subscription.cpp), and the
 * switches that collection.cpp throws. Poller thread only; only those two units
 * include it. */
#ifndef GA_SUBSCRIPTION_H
#define GA_SUBSCRIPTION_H

#include "ga_internal.h"

struct ga_sub_state {
    CUpti_SubscriberHandle handle; /* nullptr: not subscribed (or handed to a teardown) */
    bool graph_cbs;                /* RESOURCE graph callbacks enabled */
    bool cbids_on;                 /* launch callbacks enabled now */
    /* ...how often since the last finalize: CUPTI fires them after the first three
     * only, and a second before a window mixes the records' ids (docs/estimator.md) */
    unsigned enables;
    bool activity_on;   /* CONCURRENT_KERNEL enabled now */
    bool activity_used; /* enabled at least once since the last flush */
    bool records_held;  /* a window opened: records to release at detach */
};
GA_HIDDEN extern ga_sub_state ga_sub;

/* Subscribe (again, after a teardown), with the graph callbacks. */
GA_HIDDEN CUptiResult ga_sub_up(const char **what) noexcept;
/* The launch callbacks on or off (keep_graphs: the graph launches' stay on). */
GA_HIDDEN CUptiResult ga_sub_launch_cbids(bool on, bool keep_graphs = false) noexcept;
/* Kernel activity on or off, timed into the budget's stalls. */
GA_HIDDEN CUptiResult ga_sub_activity(bool on, const char **what) noexcept;

struct ga_sub_edges {
    double enable_mean_us, enable_max_us, disable_mean_us, disable_max_us;
};
GA_HIDDEN ga_sub_edges ga_sub_edge_stats(void) noexcept; /* for the exit line */

#endif
