/* graph_nodes.h: the graph node probes: each kernel node's capture stack, kept under (tgid, start
 * tag, node id) in node_stacks, copied to clones, deleted with the node. */
#ifndef GA_BPF_GRAPH_NODES_H
#define GA_BPF_GRAPH_NODES_H

#include "maps.h"
#include "stacks.h"


/* ---- graph_node_stack(u64 node_id, u64 stack_id, const u64 *frames,
 *                       u32 nframes): the code that created a kernel node ---- */
int ga_graph_node_stack(struct pt_regs *ctx)
{
    u64 pid_tgid = bpf_get_current_pid_tgid();
    u32 tgid = pid_tgid >> 32;
    u64 node_id = 0, stack_id = 0, frames = 0;
    u32 nframes = 0;

    bpf_usdt_readarg(1, ctx, &node_id);
    bpf_usdt_readarg(2, ctx, &stack_id);
    bpf_usdt_readarg(3, ctx, &frames);
    bpf_usdt_readarg(4, ctx, &nframes);
    count(GA_CNT_GRAPH_NODES, 1);
    u32 start = see_proc(tgid);
    stack_id = store_stack(pid_tgid, start, stack_id, frames, nframes, 0);

    struct ga_node_key nk = {.tgid = tgid, .start = start, .node_id = node_id};
    struct ga_node_val nv = {.stack_id = stack_id};
    if (node_stacks.update(&nk, &nv) != 0)
        count(GA_DROP_NODE_FULL, 1);
    return 0;
}

/* ---- graph_node_cloned(u64 original_node_id, u64 node_id) ---- */
int ga_graph_node_cloned(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 original_node_id = 0, node_id = 0;

    bpf_usdt_readarg(1, ctx, &original_node_id);
    bpf_usdt_readarg(2, ctx, &node_id);
    u32 start = see_proc(tgid);
    struct ga_node_key ok = {.tgid = tgid, .start = start, .node_id = original_node_id};
    struct ga_node_val *ov = node_stacks.lookup(&ok);
    if (!ov) {
        /* Created before the shim attached: kernel_batch marks its kernels. */
        count(GA_CNT_GRAPH_CLONE_UNKNOWN, 1);
        return 0;
    }
    struct ga_node_val nv = {.stack_id = ov->stack_id};
    struct ga_node_key nk = {.tgid = tgid, .start = start, .node_id = node_id};
    if (node_stacks.update(&nk, &nv) != 0) {
        count(GA_DROP_NODE_FULL, 1);
        return 0;
    }
    count(GA_CNT_GRAPH_CLONES, 1);
    return 0;
}

/* ---- graph_node_destroyed(u64 node_id) ---- */
int ga_graph_node_destroyed(struct pt_regs *ctx)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    u64 node_id = 0;

    bpf_usdt_readarg(1, ctx, &node_id);
    struct ga_node_key nk = {.tgid = tgid, .start = see_proc(tgid), .node_id = node_id};
    node_stacks.delete(&nk);
    count(GA_CNT_GRAPH_DESTROYED, 1);
    return 0;
}

#endif /* GA_BPF_GRAPH_NODES_H */
