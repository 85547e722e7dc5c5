/* aggregate.h: adding a record to the aggregation maps: the totals and sampled sums, and the launch-to-start
 * latency histogram. */
#ifndef GA_BPF_AGGREGATE_H
#define GA_BPF_AGGREGATE_H

#include "maps.h"

struct batch_ctx {
    u64 recs;
    u32 tgid;
    u32 count;
    u32 start;              /* the process's start tag */
    u32 trace;              /* 1: send each record as a GA_EV_KERNEL (timelines) */
    void *totals;           /* this generation's maps (agg_maps, lat_maps) */
    void *sampled;
    void *latency;
};

/* The generation BPF writes now (the agent drains the other). */
static __always_inline u32 current_gen(void)
{
    u32 zero = 0;
    u32 *g = generation.lookup(&zero);
    return (g && *g) ? 1 : 0;
}

/* Generation gen's aggregation maps into bc; -1 if they are not there (the agent
 * fills agg_maps/lat_maps before it attaches anything). */
static __always_inline int batch_maps(struct batch_ctx *bc, u32 gen)
{
    u32 it = gen, is = gen + 2, il = gen;
    bc->totals = agg_maps.lookup(&it);
    bc->sampled = agg_maps.lookup(&is);
    bc->latency = lat_maps.lookup(&il);
    return (bc->totals && bc->sampled && bc->latency) ? 0 : -1;
}

/* The value of key in map, inserted as zeros if absent; NULL (counted) if the
 * map is full. Insert-then-lookup rather than insert-with-the-values: two
 * batches of one process (the poller's and a flush from an app thread) may
 * race on a new key, and BPF_NOEXIST plus atomic adds keeps both. */
static __always_inline void *agg_slot(void *map, void *key, void *zero)
{
    void *v = bpf_map_lookup_elem(map, key);
    if (v)
        return v;
    bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
    v = bpf_map_lookup_elem(map, key);
    if (!v)
        count(GA_DROP_AGG_FULL, 1);
    return v;
}

static __always_inline void lat_add(struct batch_ctx *bc, struct ga_lat_key *k, u64 lat)
{
    struct ga_lat_val zero = {};
    struct ga_lat_val *v = agg_slot(bc->latency, k, &zero);
    if (!v)
        return;
    __sync_fetch_and_add(&v->count, 1);
    __sync_fetch_and_add(&v->sum_ns, lat);
}

static __always_inline int agg_add(void *map, struct ga_agg_key *k, u64 ns, u64 w)
{
    struct ga_agg_val zero = {};
    struct ga_agg_val *v = agg_slot(map, k, &zero);
    if (!v)
        return -1;
    __sync_fetch_and_add(&v->gpu_ns, ns);
    __sync_fetch_and_add(&v->launches, 1);
    __sync_fetch_and_add(&v->weighted_ns, ns * w);
    __sync_fetch_and_add(&v->weighted_launches, w);
    return 0;
}

/* floor(log2(x)) for x > 0; 0 for 0. Branch-free: inside the batch loop every
 * branch multiplies the states the verifier walks. */
static __always_inline u32 log2_u64(u64 x)
{
    x |= x >> 1;
    x |= x >> 2;
    x |= x >> 4;
    x |= x >> 8;
    x |= x >> 16;
    x |= x >> 32;             /* every bit below the highest set bit is set */
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    u32 ones = (x * 0x0101010101010101ULL) >> 56;
    return ones ? ones - 1 : 0;
}

/* Launch-to-start latency of a sampled, non-graph launch (the kernels of a
 * graph share one launch: later nodes would count the earlier ones' time). */
static __always_inline void latency_one(struct batch_ctx *bc, struct ga_kernel_record *r,
                                        u64 launch_ns)
{
    if (!launch_ns || r->graph_id || (r->flags & GA_REC_GRAPH) || r->start_ns < launch_ns)
        return;
    u64 lat = r->start_ns - launch_ns;
    struct ga_lat_key lk = {.tgid = bc->tgid, .device_id = r->device_id,
                            .bucket = log2_u64(lat), .pad = 0};
    lat_add(bc, &lk, lat);
}

#endif /* GA_BPF_AGGREGATE_H */
