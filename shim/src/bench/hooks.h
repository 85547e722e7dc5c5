/* hooks.h: the benchmark build's audit mode and experiments, the one seam between
 * the shim and shim/src/bench/. Included by ga_internal.h (which defines GA_HIDDEN
 * and the types used here); the shim's sources call only what is declared here. */
#ifndef GA_BENCH_HOOKS_H
#define GA_BENCH_HOOKS_H

/* ---- the benchmark build's audit mode and experiments (shim/src/bench/) ----
 * Compiled in only with GA_BENCH_BUILD (`make shim-bench`); the shim users inject
 * gets the no-op versions below, and names the settings it ignores. */
#ifdef GA_BENCH_BUILD
struct ga_bench_config {
    char audit_file[256];           /* GPU_AGENT_AUDIT_FILE: "" = off (audit.cpp) */
    uint32_t exp_on_ms, exp_off_ms; /* GPU_AGENT_EXP_TOGGLE_MS=ON[:OFF]; 0 = off */
    uint32_t exp_cb_windowed;       /* GPU_AGENT_EXP_CALLBACKS=windowed */
    uint32_t exp_cb_runtime;        /* GPU_AGENT_EXP_CALLBACKS=runtime */
    uint32_t exp_internal;          /* GPU_AGENT_EXP_INTERNAL_LAUNCHES=1 */
    uint32_t exp_hold_activity;     /* GPU_AGENT_EXP_HOLD=activity */
    uint32_t exp_late_subscribe;    /* GPU_AGENT_EXP_SUBSCRIBE=late */
    uint32_t exp_count_cycle;       /* GPU_AGENT_EXP_COUNT=cycle (1) or cycle-edge (2) (count_cycle.cpp) */
};
GA_HIDDEN extern ga_bench_config ga_bench;
#define GA_EXP(field) (ga_bench.exp_##field)
GA_HIDDEN void ga_bench_read_config(char *bad, size_t bad_size) noexcept; /* experiments.cpp */
#define GA_BENCH_READ_CONFIG ga_bench_read_config /* shim.cpp hands it to ga_read_config */
GA_HIDDEN bool ga_exp_toggled_off(uint64_t now_ns) noexcept;   /* the OFF part of a toggle */
GA_HIDDEN void ga_exp_internal_activity(bool on) noexcept;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_internal_launches;
static inline bool ga_audit_on(void) noexcept { return ga_bench.audit_file[0] != 0; }
GA_HIDDEN void ga_audit_init(void) noexcept; /* audit.cpp */
GA_HIDDEN void ga_audit_mark(uint32_t correlation_id) noexcept;
GA_HIDDEN bool ga_audit_in_window(uint32_t correlation_id) noexcept;
GA_HIDDEN void ga_audit_tally(uint64_t kernel_id, uint64_t ns, bool in_window) noexcept;
GA_HIDDEN void ga_audit_write(void) noexcept;
/* count_cycle.cpp: a free count piece in a CUPTI cycle of its own */
GA_HIDDEN void ga_exp_piece_plan(uint64_t start, uint64_t period_ns, uint64_t slot_ns, uint64_t window_lo,
                                 uint64_t *rng) noexcept;
GA_HIDDEN bool ga_exp_piece(uint64_t now_ns, uint64_t *next_edge_ns) noexcept;
GA_HIDDEN void ga_exp_piece_started(uint64_t now_ns) noexcept;
GA_HIDDEN bool ga_exp_piece_running(void) noexcept;
GA_HIDDEN void ga_exp_piece_stopped(uint64_t now_ns) noexcept;
GA_HIDDEN void ga_exp_piece_take(uint64_t *launches, uint64_t *ns) noexcept;
GA_HIDDEN uint64_t ga_exp_pieces(void) noexcept;
#else
#define GA_EXP(field) 0u
#define GA_BENCH_READ_CONFIG nullptr
static inline bool ga_exp_toggled_off(uint64_t) noexcept { return false; }
static inline void ga_exp_internal_activity(bool) noexcept {}
static inline bool ga_audit_on(void) noexcept { return false; }
static inline void ga_audit_init(void) noexcept {}
static inline void ga_audit_mark(uint32_t) noexcept {}
static inline bool ga_audit_in_window(uint32_t) noexcept { return true; }
static inline void ga_exp_piece_plan(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t *) noexcept {}
static inline bool ga_exp_piece(uint64_t, uint64_t *) noexcept { return false; }
static inline void ga_exp_piece_started(uint64_t) noexcept {}
static inline bool ga_exp_piece_running(void) noexcept { return false; }
static inline void ga_exp_piece_stopped(uint64_t) noexcept {}
static inline void ga_exp_piece_take(uint64_t *launches, uint64_t *ns) noexcept { *launches = *ns = 0; }
static inline uint64_t ga_exp_pieces(void) noexcept { return 0; }
static inline void ga_audit_tally(uint64_t, uint64_t, bool) noexcept {}
static inline void ga_audit_write(void) noexcept {}
#endif

#endif /* GA_BENCH_HOOKS_H */
