/* graphs.cpp: CUDA graphs: which code created each kernel node.
 *
 * While attached, the shim also enables a few CUPTI_CB_DOMAIN_RESOURCE graph
 * callbacks (ga_graph_cbids). They fire when graphs are built, instantiated
 * and destroyed, never at a launch or a replay, so none of this is on the
 * launch hot path:
 *
 *   GRAPHNODE_CREATED (kernel nodes): runs inside the API that created the
 *     node: during stream capture, the launch call the capturing code made;
 *     otherwise cuGraphAddKernelNode & co. The thread is unwound exactly like
 *     a sampled launch and graph_node_stack(node id, stack) is fired; BPF adds
 *     the thread's Python frames and keeps node id -> stack. Never sampled.
 *   GRAPHNODE_CLONED: graph_node_cloned(original id, new id). Instantiation
 *     clones every node into the exec graph (the graphNodeId in kernel
 *     records is the exec node's); cuGraphClone and child graphs clone too.
 *   GRAPHNODE_DESTROY_STARTING: graph_node_destroyed(id), deferred (below).
 *   GRAPHEXEC_CREATE_STARTING .. GRAPHEXEC_CREATED: the clones made on this
 *     thread in between are the exec graph's nodes; the shim keeps their ids
 *     per exec graph (CUDA reports no per-node destroy for exec graphs) and at
 *     GRAPHEXEC_DESTROY_STARTING fires graph_node_destroyed for each, then
 *     forgets them. So BPF's node map and this table only hold live nodes.
 *
 * Destroys are deferred: kernel records reach BPF in activity buffers, up to a
 * flush period after the kernels ran, and a graph is often destroyed right
 * after its last replay (or at exit). A node id destroyed now is queued and
 * fired after the poller's next-but-one periodic flush (ga_graph_after_flush),
 * so it is deleted 1-2 flush periods (GPU_AGENT_FLUSH_MS) later, when its
 * kernels' records are through. The queue holds at most DQ_MAX ids; past that
 * destroys are dropped (BPF's node map is an LRU: memory stays bounded).
 *
 * Nothing is kept across a detach: graphs destroyed while detached are not
 * reported, so the exec table is emptied at attach and at detach (see
 * docs/graphs.md for why the shim keeps no capture stacks of its own).
 * Allocation and a mutex are fine here: these callbacks run at graph
 * build/teardown time, inside driver calls that allocate themselves. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ga_probes.h"
#include "ga_internal.h"

const CUpti_CallbackId ga_graph_cbids[] = {
    CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,          CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED,
    CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING, CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING,
    CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED,          CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING,
};
const unsigned ga_graph_cbid_count = sizeof(ga_graph_cbids) / sizeof(ga_graph_cbids[0]);

static std::atomic<uint64_t> st_node_stacks, st_clones, st_destroyed, st_execs_live,
    st_exec_nodes_live;

/* ---- exec graph -> its nodes' ids ---- */
struct exec_entry {
    uintptr_t exec;
    uint64_t *ids;
    uint32_t n;
    exec_entry *next;
};
#define EXEC_BUCKETS 1024u
static pthread_mutex_t exec_mu = PTHREAD_MUTEX_INITIALIZER;
static exec_entry *exec_tab[EXEC_BUCKETS];

static inline unsigned exec_bucket(uintptr_t x) {
    uint64_t h = (uint64_t)x * 0x9e3779b97f4a7c15ULL;
    return (unsigned)(h >> 54) & (EXEC_BUCKETS - 1);
}

/* Clones seen on this thread since GRAPHEXEC_CREATE_STARTING. */
struct pending_ids {
    uint64_t *ids;
    uint32_t n, cap;
    bool active;
};
static __thread pending_ids t_pending;

static void pending_add(uint64_t id) {
    pending_ids *p = &t_pending;
    if (!p->active) return;
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        if (cap > (1u << 24)) return; /* absurd: stop recording (BPF's LRU still bounds it) */
        uint64_t *ids = (uint64_t *)realloc(p->ids, cap * sizeof(uint64_t));
        if (!ids) return;
        p->ids = ids;
        p->cap = cap;
    }
    p->ids[p->n++] = id;
}

static void pending_drop(void) {
    free(t_pending.ids);
    t_pending.ids = nullptr;
    t_pending.n = t_pending.cap = 0;
    t_pending.active = false;
}

static void exec_created(uintptr_t exec) {
    pending_ids *p = &t_pending;
    if (!p->active) return;
    if (!exec || !p->n) {
        pending_drop();
        return;
    }
    exec_entry *e = (exec_entry *)malloc(sizeof(exec_entry));
    if (!e) {
        pending_drop();
        return;
    }
    e->exec = exec;
    e->ids = p->ids; /* ownership moves to the table */
    e->n = p->n;
    p->ids = nullptr;
    p->n = p->cap = 0;
    p->active = false;
    unsigned b = exec_bucket(exec);
    pthread_mutex_lock(&exec_mu);
    e->next = exec_tab[b];
    exec_tab[b] = e;
    pthread_mutex_unlock(&exec_mu);
    st_execs_live.fetch_add(1, std::memory_order_relaxed);
    st_exec_nodes_live.fetch_add(e->n, std::memory_order_relaxed);
}

__attribute__((noinline)) static void fire_destroyed(uint64_t id) {
    ga_fire_graph_node_destroyed(id);
    st_destroyed.fetch_add(1, std::memory_order_relaxed);
}

/* ---- deferred destroys ---- */
#define DQ_MAX (1u << 20)
struct id_list {
    uint64_t *ids;
    uint32_t n, cap;
};
static pthread_mutex_t dq_mu = PTHREAD_MUTEX_INITIALIZER;
static id_list dq_now, dq_old; /* queued since the last flush / before it */
static std::atomic<uint64_t> st_dq_dropped;

static void defer_destroy(const uint64_t *ids, uint32_t n) {
    pthread_mutex_lock(&dq_mu);
    for (uint32_t i = 0; i < n; i++) {
        id_list *q = &dq_now;
        if (q->n == q->cap) {
            uint32_t cap = q->cap ? q->cap * 2 : 256;
            uint64_t *p = cap <= DQ_MAX ? (uint64_t *)realloc(q->ids, cap * sizeof(uint64_t))
                                        : nullptr;
            if (!p) {
                st_dq_dropped.fetch_add(n - i, std::memory_order_relaxed);
                break;
            }
            q->ids = p;
            q->cap = cap;
        }
        q->ids[q->n++] = ids[i];
    }
    pthread_mutex_unlock(&dq_mu);
}

void ga_graph_after_flush(void) noexcept {
    pthread_mutex_lock(&dq_mu);
    id_list due = dq_old;
    dq_old = dq_now;
    dq_now.ids = nullptr;
    dq_now.n = dq_now.cap = 0;
    pthread_mutex_unlock(&dq_mu);
    for (uint32_t i = 0; i < due.n; i++) fire_destroyed(due.ids[i]);
    free(due.ids);
}

static void dq_clear(void) {
    pthread_mutex_lock(&dq_mu);
    free(dq_now.ids);
    free(dq_old.ids);
    dq_now = id_list{nullptr, 0, 0};
    dq_old = id_list{nullptr, 0, 0};
    pthread_mutex_unlock(&dq_mu);
}

static void exec_destroyed(uintptr_t exec) {
    if (!exec) return;
    unsigned b = exec_bucket(exec);
    exec_entry *found = nullptr;
    pthread_mutex_lock(&exec_mu);
    for (exec_entry **pp = &exec_tab[b]; *pp; pp = &(*pp)->next) {
        if ((*pp)->exec == exec) {
            found = *pp;
            *pp = found->next;
            break;
        }
    }
    pthread_mutex_unlock(&exec_mu);
    if (!found) return;
    defer_destroy(found->ids, found->n);
    st_execs_live.fetch_sub(1, std::memory_order_relaxed);
    st_exec_nodes_live.fetch_sub(found->n, std::memory_order_relaxed);
    free(found->ids);
    free(found);
}

void ga_graph_reset(void) noexcept {
    exec_entry *all = nullptr;
    pthread_mutex_lock(&exec_mu);
    for (unsigned b = 0; b < EXEC_BUCKETS; b++) {
        exec_entry *e = exec_tab[b];
        while (e) {
            exec_entry *n = e->next;
            e->next = all;
            all = e;
            e = n;
        }
        exec_tab[b] = nullptr;
    }
    pthread_mutex_unlock(&exec_mu);
    while (all) {
        exec_entry *n = all->next;
        free(all->ids);
        free(all);
        all = n;
    }
    st_execs_live.store(0, std::memory_order_relaxed);
    st_exec_nodes_live.store(0, std::memory_order_relaxed);
    dq_clear();
    /* Other threads' pending lists end at their GRAPHEXEC_CREATED. */
    if (t_pending.active) pending_drop();
}

static bool node_id(CUgraphNode node, uint64_t *id) {
    if (!node || !ga_cupti.GetGraphNodeId || !ga_cupti_gate_enter()) return false; /* a teardown runs */
    bool ok = ga_cupti.GetGraphNodeId(node, id) == CUPTI_SUCCESS && *id != 0;
    ga_cupti_gate_leave();
    return ok;
}

/* noinline: one graph_node_stack site; the frame buffer lives only here. */
__attribute__((noinline)) static void take_node_stack(uint64_t id) {
    uint64_t frames[GA_MAX_FRAMES];
    uint64_t stack_id = 0;
    uint32_t n = ga_unwind(frames, &stack_id);
    ga_fire_graph_node_stack(id, stack_id, frames, n);
    st_node_stacks.fetch_add(1, std::memory_order_relaxed);
}

__attribute__((noinline)) static void fire_cloned(uint64_t orig, uint64_t id) {
    ga_fire_graph_node_cloned(orig, id);
    st_clones.fetch_add(1, std::memory_order_relaxed);
}

std::atomic<int> ga_graphs_made;

void ga_graph_callback(CUpti_CallbackId cbid, const void *cbdata) noexcept {
    const CUpti_ResourceData *rd = (const CUpti_ResourceData *)cbdata;
    if (!rd || !rd->resourceDescriptor) return;
    const CUpti_GraphData *gd = (const CUpti_GraphData *)rd->resourceDescriptor;
    uint64_t id = 0, orig = 0;
    switch (cbid) {
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
        /* Only kernel nodes produce kernel records. A child-graph node's
         * kernels are clones of the child graph's own nodes (GRAPHNODE_CLONED). */
        if (gd->nodeType == CU_GRAPH_NODE_TYPE_KERNEL && node_id(gd->node, &id)) take_node_stack(id);
        break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED:
        if (node_id(gd->node, &id) && node_id(gd->originalNode, &orig) && id != orig) {
            fire_cloned(orig, id);
            pending_add(id);
        }
        break;
    case CUPTI_CBID_RESOURCE_GRAPHNODE_DESTROY_STARTING:
        if (node_id(gd->node, &id)) defer_destroy(&id, 1);
        break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATE_STARTING:
        if (t_pending.active) pending_drop(); /* a previous one that never finished */
        t_pending.active = true;
        break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED:
        ga_graphs_made.store(1, std::memory_order_relaxed);
        exec_created((uintptr_t)gd->graphExec);
        break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_DESTROY_STARTING:
        exec_destroyed((uintptr_t)gd->graphExec);
        break;
    default:
        break;
    }
}

uint64_t ga_graph_stat(int which) noexcept {
    switch (which) {
    case GA_SC_NODE_STACKS: return st_node_stacks.load();
    case GA_SC_CLONES: return st_clones.load();
    case GA_SC_NODES_DESTROYED: return st_destroyed.load();
    case GA_SC_EXECS: return st_execs_live.load();
    case GA_SC_EXEC_NODES: return st_exec_nodes_live.load();
    case GA_SC_DESTROY_QUEUE: {
        pthread_mutex_lock(&dq_mu);
        uint64_t n = (uint64_t)dq_now.n + dq_old.n;
        pthread_mutex_unlock(&dq_mu);
        return n;
    }
    case GA_SC_DESTROYS_DROPPED: return st_dq_dropped.load();
    }
    return 0;
}

void ga_graph_atfork_child(void) noexcept {
    pthread_mutex_init(&exec_mu, nullptr);
    pthread_mutex_init(&dq_mu, nullptr);
    ga_graph_reset();
}
