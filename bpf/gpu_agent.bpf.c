/*
 * gpu_agent.bpf.c: the in-kernel half of gpu-agent (bcc C).
 *
 * The shim (shim/src) fires three data probes (see gpu_agent_probes.h):
 *   cuda_correlation -> remember (tgid, correlation id) -> sampled stack,
 *                       store each distinct stack once;
 *   kernel_batch     -> exact per-kernel GPU time into kernel_totals, and the
 *                       sampled share, joined on correlation id, into
 *                       kernel_sampled; for sampled launches, kernel start
 *                       minus launch time into the latency histogram;
 *   kernel_name      -> forwarded to the agent through the ring buffer;
 *   graph_node_stack / graph_node_cloned / graph_node_destroyed
 *                    -> node_stacks: graph node id -> the stack that created
 *                       it; kernel_batch joins graph kernel records to it
 *                       (capture_stack_id in the aggregation keys).
 * The aggregation maps come in two sets (totals0/sampled0/latency0, totals1/...);
 * `generation` says which one kernel_batch writes. The agent
 * (agent/gpu_agent/probes/bpf_session.py) drains by flipping the generation, waiting
 * until no program can still be writing the old set, then reading and
 * deleting the whole old set: no increment can land on a key being deleted,
 * so totals stay exact across drains, and in-kernel state stays bounded.
 *
 * The programs live in the headers below, each of which compiles on its own (it
 * includes what it uses; agent/gpu_agent/probes/paths.py pastes each header once,
 * since bcc rewrites map calls only in the main text). Compiled by bcc with -DGA_BPF -I<repo>/shim/include; bcc prepends the USDT
 * argument readers (bpf_usdt_readarg) generated from the shim's stapsdt note.
 * Tunables (cflags): GA_AGG_ENTRIES, GA_SAMPLED_ENTRIES, GA_CORR_ENTRIES,
 * GA_STACK_ENTRIES, GA_NODE_ENTRIES, GA_RINGBUF_PAGES, GA_HAVE_GROUP_DEAD.
 */

#include "maps.h"         /* the shared maps, count(), see_proc() */
#include "correlation.h"  /* cuda_correlation: sampled launches and their stacks */
#include "graph_nodes.h"  /* graph nodes' capture stacks */
#include "kernel_batch.h" /* kernel_batch: the records, aggregated and joined */
#include "timeline.h"     /* traced processes' records as events; gpu_device */
#include "kernel_names.h" /* kernel_name: names to the agent */
#include "pcsampling.h"   /* opt-in PC sampling: batches, stall reasons, cubins */
#include "procs.h"        /* attach, replay, exit */
#include "parcagpu.h"     /* parcagpu's probes: a second source of kernels */
#include "parcagpu_pc.h"  /* its PC sampling and error probes */
