/* gpu_agent_shim.h: the shim's tiny C API for tests and tools (dlsym them from
 * the loaded shim), and its counters, named once here. */
#ifndef GPU_AGENT_SHIM_H
#define GPU_AGENT_SHIM_H

#include <stdint.h>

/* X(ID, name, meaning): gpu_agent_shim_counter(GA_SC_ID); name is what
 * gpu_agent_shim_counter_name() returns, and what test output prints. */
#define GA_SHIM_COUNTER_TABLE(X)                                                        \
    X(LAUNCHES, launches, "launches the callbacks saw in windows")                      \
    X(SAMPLES, samples, "cuda_correlation probes fired")                                \
    X(FORCED, forced_samples, "of those, forced (first launch of a function or exec)")  \
    X(BATCHES, batches, "kernel_batch probes fired")                                    \
    X(RECORDS, records, "kernel records converted")                                     \
    X(CUPTI_DROPPED, cupti_dropped, "records CUPTI dropped")                            \
    X(NAMES, names, "distinct kernel names")                                            \
    X(NAME_CHUNKS, name_chunks, "kernel_name probes fired")                             \
    X(ATTACHES, attaches, "attaches")                                                   \
    X(DETACHES, detaches, "detaches")                                                   \
    X(FLUSHES, flushes, "periodic activity flushes")                                    \
    X(NULL_BUFFERS, null_buffers, "NULL buffers handed to CUPTI (pool exhausted)")      \
    X(CUT_NAMES, cut_names, "names cut at GA_MAX_NAME_LEN")                             \
    X(BUFFERS, buffers, "activity buffers allocated")                                   \
    X(POLLER, poller_running, "the poller thread runs (0/1)")                           \
    X(CUDA_LIVE, cuda_live, "CUDA is used in this process (0/1)")                       \
    X(NODE_STACKS, node_stacks, "graph_node_stack probes fired")                        \
    X(CLONES, clones, "graph_node_cloned probes fired")                                 \
    X(NODES_DESTROYED, nodes_destroyed, "graph_node_destroyed probes fired")            \
    X(EXECS, execs, "exec graphs tracked now")                                          \
    X(EXEC_NODES, exec_nodes, "exec graph node ids tracked now")                        \
    X(DESTROY_QUEUE, destroy_queue, "destroyed node ids waiting for a flush")           \
    X(DESTROYS_DROPPED, destroys_dropped, "destroys dropped (queue full)")              \
    X(WINDOWS, windows, "collection windows opened")                                    \
    X(IN_WINDOW, in_window, "inside a window now (0/1)")                                \
    X(UNWEIGHTED, unweighted, "launches no windowed record stands for")                 \
    X(HELD_OVERFLOW, held_overflow, "windowed records fired before their period ended") \
    X(UNSEEN, unseen, "windowed records whose launch no callback saw")                  \
    X(JOINED, joined, "launches of window-less periods, weighed with the one before")   \
    X(LEFT_OUT_LAUNCHES, left_out_launches, "graph launches left out of their window")  \
    X(LEFT_OUT_RECORDS, left_out_records, "records dropped for it")                     \
    X(LEFT_OUT_LATE, left_out_late, "of those, records that came after their weighing") \
    X(PC_SAMPLES, pc_samples, "PC samples passed on (GPU_AGENT_PC_SAMPLING)")          \
    X(PC_RECORDS, pc_records, "their (pc, stall reason) records")                       \
    X(PC_DROPPED, pc_dropped, "PC samples CUPTI reported lost")                         \
    X(CUBINS, cubins, "cubins kept and announced")                                      \
    X(CUBINS_DROPPED, cubins_dropped, "cubins not kept (GPU_AGENT_PC_CUBIN_MB reached)") \
    X(PC_GET_DATA_ERRORS, pc_get_data_errors, "cuptiPCSamplingGetData failures (samples lost)") \
    X(OUTSIDE_WINDOWS, outside_windows, "records of launches outside windows (PC sampling holds activity on)") \
    X(TEARDOWNS, teardowns, "CUPTI finalized at a window's end or a detach")            \
    X(TEARDOWNS_FAILED, teardowns_failed, "teardowns that failed or were put off")      \
    X(GATE_SKIPPED, gate_skipped, "CUPTI calls a callback skipped during a teardown")   \
    X(WINDOWS_SKIPPED, windows_skipped, "windows not opened: another CUPTI client subscribed") \
    X(BUDGET_OVER, budget_over, "periods planned over GPU_AGENT_OVERHEAD_BUDGET to keep a window in every 30 s")

enum ga_shim_counter {
#define GA_SC_ENUM(id, name, meaning) GA_SC_##id,
    GA_SHIM_COUNTER_TABLE(GA_SC_ENUM)
#undef GA_SC_ENUM
    GA_SC_COUNT
};

#ifdef __cplusplus
extern "C" {
#endif
int gpu_agent_shim_state(void);                    /* 0 idle, 1 attached, -1 disabled */
uint64_t gpu_agent_shim_counter(int which);        /* enum ga_shim_counter; 0 past the end */
const char *gpu_agent_shim_counter_name(int which); /* NULL past the end */
void gpu_agent_shim_poll(void);                    /* one poll step now */
#ifdef __cplusplus
}
#endif

#endif
