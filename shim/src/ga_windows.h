/* ga_windows.h: the collection windows' declarations (window.cpp: the schedule;
 * weights.cpp: the record weights; held.cpp: the records waiting for them;
 * budget.cpp and tail.cpp: the cost budget), part of ga_internal.h, which
 * includes it in place. */
#ifndef GA_WINDOWS_H
#define GA_WINDOWS_H

/* A state switched on and off (the launch callbacks, window.cpp; a window's tail,
 * tail.cpp), and its time on since the last take: a period's share. Poller only. */
struct ga_span {
    uint64_t ns, t0; /* time on before t0; on since t0 (0: off) */
    void on(uint64_t now) noexcept {
        if (!t0) t0 = now ? now : 1;
    }
    void off(uint64_t now) noexcept {
        if (t0) ns += now > t0 ? now - t0 : 0;
        t0 = 0;
    }
    uint64_t peek(uint64_t now) const noexcept { return ns + (t0 && now > t0 ? now - t0 : 0); }
    uint64_t take(uint64_t now) noexcept {
        uint64_t t = ns + (t0 && now > t0 ? now - t0 : 0);
        if (t0) t0 = now;
        ns = 0;
        return t;
    }
};

/* ---- collection windows (window.cpp: schedule; weights.cpp: record weights) ---- */
/* Launches now are collected (GA_WIN_OPEN), or not: GA_WIN_OFF, or GA_WIN_EDGE
 * while kernel activity goes on before a window opens or off after it closes. An
 * edge's launches are traced but not the window's: the launch callback notes them
 * as outside (ga_window_note_outside), and their records are dropped, not weighed. */
enum { GA_WIN_OFF = 0, GA_WIN_OPEN = 1, GA_WIN_EDGE = 2 };
GA_HIDDEN extern std::atomic<int> ga_window_on;
GA_HIDDEN void ga_window_begin(uint64_t now_ns) noexcept;  /* at attach (ga_now_ns) */
GA_HIDDEN uint64_t ga_window_attached_at(void) noexcept;   /* that attach time */
GA_HIDDEN uint32_t ga_window_slots(void) noexcept;         /* slots of the current period (N) */
GA_HIDDEN uint64_t ga_window_period_ns(void) noexcept;     /* the current period's length */
/* budget.cpp: the windows' schedule under GPU_AGENT_OVERHEAD_BUDGET, from what
 * they cost this process (stalls: teardown, re-subscription, activity switches). */
GA_HIDDEN bool ga_budget_on(void) noexcept;
GA_HIDDEN void ga_budget_set_tails(bool on) noexcept; /* collection.cpp: windows torn down, with tails */
GA_HIDDEN void ga_budget_note_stall(uint64_t ns, bool teardown) noexcept;
GA_HIDDEN void ga_budget_note_window(uint64_t win_ns, uint64_t win_launches, double base_rate,
                                     uint64_t count_launches, uint64_t count_ns) noexcept;
GA_HIDDEN void ga_budget_plan(bool first, uint32_t *slots, uint64_t *slot_ns) noexcept;
GA_HIDDEN uint64_t ga_budget_stat_over(void) noexcept;
GA_HIDDEN double ga_budget_count_bias(double count_rate) noexcept; /* launches per ns */
GA_HIDDEN double ga_budget_callback_ns(double count_rate) noexcept;
GA_HIDDEN void ga_budget_note_tail(double cb_ns) noexcept;
/* tail.cpp: after each window (with teardowns), kernel activity alone for half a
 * window: its launches, counted by their records, measure the callbacks' cost. */
GA_HIDDEN extern std::atomic<uint64_t> ga_sample_ns; /* time in stack samples (callbacks.cpp) */
GA_HIDDEN void ga_tail_reset(void) noexcept;
/* win_busy: its busy-clock ns (0: none); close_ts: the CUPTI time its callbacks went off (0: not known) */
GA_HIDDEN void ga_tail_begin(uint64_t now_ns, uint64_t win_ns, uint64_t win_launches, uint64_t win_busy,
                             uint64_t close_ts) noexcept;
GA_HIDDEN void ga_tail_end(uint64_t now_ns) noexcept;
GA_HIDDEN void ga_tail_window_opened(uint64_t cupti_ts) noexcept; /* its CUPTI time (0: not known) */
/* A windowed, non-graph record (unseen: no launch callback noted it; its kernel's
 * CUPTI start): the tail's? */
GA_HIDDEN bool ga_tail_record(bool unseen, uint64_t start_ns) noexcept;
GA_HIDDEN void ga_tail_fold(void) noexcept;
GA_HIDDEN uint64_t ga_tail_period_ns(uint64_t now_ns) noexcept;
GA_HIDDEN uint64_t ga_tail_period_busy(void) noexcept; /* its busy-clock time (busy.cpp) */
/* busy.cpp: the busy clock, CPU ns of the threads that launch (why: there). */
/* The launch callback, in a window: this thread launches (once a round, a period:
 * the caller keeps the round it was noted in, ga_busy_gen, in its thread's state). */
GA_HIDDEN extern std::atomic<uint32_t> ga_busy_gen;
GA_HIDDEN void ga_busy_note(uint32_t *round) noexcept;
GA_HIDDEN uint64_t ga_busy_now(void) noexcept;     /* the clock (poller) */
GA_HIDDEN bool ga_busy_usable(void) noexcept;      /* it has threads, and not too many */
GA_HIDDEN void ga_busy_period_edge(void) noexcept; /* the threads noted join; stale ones leave */
GA_HIDDEN void ga_busy_reset(void) noexcept;       /* at attach */
GA_HIDDEN void ga_tail_stats(uint64_t *tails, uint64_t *launches) noexcept;
GA_HIDDEN void ga_budget_log_exit(void) noexcept;
/* Whether collection should be on at now_ns; *next_edge_ns: when that may change. */
GA_HIDDEN bool ga_window_should_be_on(uint64_t now_ns, uint64_t *next_edge_ns) noexcept;
GA_HIDDEN void ga_window_opened(uint64_t cupti_ts) noexcept; /* CUPTI clock (0: none), at each opening */
/* With teardowns between windows (set at attach): OFF (no launch callbacks),
 * COUNT (launch callbacks only, just before a window: the launch rate) or ON. */
enum { GA_PHASE_OFF = 0, GA_PHASE_COUNT, GA_PHASE_ON, GA_PHASE_PIECE /* GPU_AGENT_EXP_COUNT=cycle */ };
GA_HIDDEN extern bool ga_window_extrapolate;
GA_HIDDEN int ga_window_phase(uint64_t now_ns, uint64_t *next_edge_ns) noexcept;
GA_HIDDEN void ga_window_count_started(uint64_t now_ns) noexcept; /* launch callbacks on */
GA_HIDDEN void ga_window_count_rates(double *count, double *extra) noexcept; /* launches/s, exit line */
GA_HIDDEN void ga_window_note_teardown(uint64_t ns) noexcept; /* a teardown's stall (any thread) */
/* A period's launches with teardowns (window.cpp; counts of weights.cpp). */
GA_HIDDEN uint64_t ga_window_extrapolated(uint64_t in, uint64_t seen, bool final) noexcept;
/* weights.cpp, from the schedule: a period ends (first: none did, at attach),
 * with the new period's N and how its launches are extrapolated from the counted
 * ones (window.cpp's); a window opened at this CUPTI time. */
typedef uint64_t (*ga_extrapolate_fn)(uint64_t in, uint64_t seen, bool final) noexcept;
GA_HIDDEN bool ga_weights_add_to_pending(uint64_t launches) noexcept; /* window.cpp's busy carry */
GA_HIDDEN void ga_weights_period_edge(bool first, uint32_t slots, ga_extrapolate_fn extrapolate,
                                      uint64_t start_ns) noexcept; /* the new period's start (ga_now_ns) */
/* Every launch before this (ga_now_ns's clock) has had its records published
 * (the `published` probe's until_ns). */
GA_HIDDEN uint64_t ga_weights_published_until(void) noexcept;
GA_HIDDEN void ga_weights_period_opened(uint64_t cupti_ts) noexcept;
GA_HIDDEN void ga_window_closed(void) noexcept;      /* at each closing */
GA_HIDDEN void ga_window_last(uint64_t *ns, uint64_t *launches) noexcept;
GA_HIDDEN uint64_t ga_window_last_busy(void) noexcept; /* its busy-clock ns (0: none) */
GA_HIDDEN void ga_window_callbacks(bool on, uint64_t now_ns) noexcept; /* launch callbacks on or off */
/* The launch counter's scan counted more slots at now_ns; `hits` were its hits just
 * before, `targets` the counted functions behind the new slots (ga_hook_targets_since). */
GA_HIDDEN void ga_window_hook_grew(uint64_t now_ns, uint64_t hits, uint64_t targets) noexcept;
GA_HIDDEN uint64_t ga_window_time_ns(void) noexcept; /* time inside windows since attach */
/* Every launch the callbacks see while attached, in windows or not. */
GA_HIDDEN extern std::atomic<uint64_t> ga_launch_seq;
/* ga_kernel_record.join_max_lag_us for a record that started at start_ns (CUPTI
 * clock): the time since the last window opened before it, so that only launches
 * of that window can join it. */
GA_HIDDEN uint32_t ga_window_join_max_lag_us(uint64_t start_ns) noexcept;
/* A windowed record whose times cannot be true: it ends before it starts, or it
 * started before the window of its launch's period opened (GA_REC_IMPOSSIBLE). */
GA_HIDDEN bool ga_window_record_impossible(uint32_t period, uint64_t start_ns, uint64_t end_ns) noexcept;
/* Set when a period ends (in ga_window_should_be_on): the poller then flushes
 * CUPTI and calls ga_window_release_records(true), which fires the held records
 * whose period's weight is now published (the period before the one that just
 * ended: launches / windowed launches, window-less periods after it included).
 * At detach and exit (after the final flush) ga_window_release_records(false)
 * ends the partial period the same way and fires everything held. */
GA_HIDDEN extern bool ga_window_period_ended;
GA_HIDDEN void ga_window_release_records(bool period_end) noexcept; /* window.cpp */
/* mix.cpp: the launch counter's hits per launch function, noted at every poll;
 * ga_mix_changed: their shares over the last polls moved away from the period's
 * before them (the job runs other code). window.cpp resets it at each period's start. */
GA_HIDDEN void ga_mix_reset(uint64_t now_ns) noexcept;
GA_HIDDEN void ga_mix_sample(uint64_t now_ns) noexcept;
/* Where a mix changed: the poll that parts the two sides (since_ns), and at it the
 * counter's hits (ga_hook_hits), the windows' launches (ga_stat_launches) and the
 * correlation id of the period's last window launch (0: its window had not opened). */
struct ga_mix_change {
    uint64_t since_ns, hits_since, in_since;
    uint32_t corr_since;
};
/* Of the polls noted so far: the shares of the last RECENT_NS moved (a cut may come
 * now); *c: where in them. */
GA_HIDDEN bool ga_mix_changed(struct ga_mix_change *c) noexcept;
/* At a period's planned end: a change at any poll of the ring, however recent (too
 * recent for ga_mix_changed, which a cut needs; a split costs nothing). */
GA_HIDDEN bool ga_mix_changed_lately(struct ga_mix_change *c) noexcept;
/* weights.cpp: the windows' launches so far and the current period's last window
 * launch's correlation id (0: none), for ga_mix_change. */
GA_HIDDEN void ga_weights_marks(uint64_t *in, uint32_t *corr) noexcept;
/* window.cpp: end the period now, where the mix changed (collection.cpp, at a poll
 * with no window, count phase or tail under way), if the rule for cuts allows it;
 * true if it did (the period ended: ga_window_period_ended). The exit line's counts:
 * cuts, those after their period's window, and those split where it changed. */
GA_HIDDEN bool ga_window_cut(uint64_t now_ns, const struct ga_mix_change *c) noexcept;
GA_HIDDEN void ga_window_cut_stats(uint64_t *cuts, uint64_t *after_window, uint64_t *split, uint64_t *handed) noexcept;
/* weights.cpp: the period that ends next gives its launches before at_ns (about
 * `launches` of them) and that part of its span to the pending period; its window's
 * launches before then (its windows' launches counted up to in_at, the last one
 * corr_at) leave its window's count, and their records are dropped (held.cpp). */
GA_HIDDEN void ga_weights_split(uint64_t at_ns, double launches, uint64_t in_at, uint32_t corr_at) noexcept;
/* weights.cpp: the period that ends next gives its launches after at_ns (about
 * `launches` of them) and that part of its span to the period after it. */
GA_HIDDEN void ga_weights_hand_on(uint64_t at_ns, double launches) noexcept;
/* held.cpp: the records of `period` whose correlation id is corr or less are dropped
 * (counted as left out), whenever they come. */
GA_HIDDEN void ga_weight_drop_through(uint32_t period, uint32_t corr) noexcept;
/* The longest period (budget.cpp's ceiling; a cut's lengthened period too). */
#define GA_PERIOD_MAX_NS 15000000000ull
/* shape.cpp: a count of the launches noted at every poll (shape_sample), and a
 * published span's shape from it (the period_shape probe, fired before the span's
 * records go). ga_shape_measure: which count stands for the launches now (window.cpp,
 * at each period's end): the launch callbacks' (no teardowns), the launch counter's,
 * or none (the clocks). */
enum { GA_SHAPE_NONE = 0, GA_SHAPE_SEQ, GA_SHAPE_HITS, GA_SHAPE_HITS_WAITING /* no calibration yet */ };
GA_HIDDEN void ga_shape_reset(uint64_t now_ns) noexcept; /* at attach */
GA_HIDDEN void ga_shape_sample(uint64_t now_ns) noexcept;
/* A scan counted more slots at now_ns, for the functions in `targets` (bit i:
 * ga_hook_hits_each's i): the poller, before that poll's sample. */
GA_HIDDEN void ga_shape_grew(uint64_t now_ns, uint64_t targets) noexcept;
GA_HIDDEN void ga_shape_measure(int measure) noexcept;
/* A published span: [start, end) holds the launches carried from window-less periods
 * before the period (`before`, made in [start, own_start)), the period's own (`own`,
 * in [own_start, own_end)) and those of window-less periods joined after it (the rest,
 * in [own_end, end)). */
struct ga_published_span {
    uint64_t start, own_start, own_end, end;
    uint64_t before, own, all;
};
GA_HIDDEN void ga_shape_publish(const ga_published_span &s) noexcept;
/* weights.cpp's part of it: publishes what is due; the last weight (x GA_WQ) */
GA_HIDDEN uint32_t ga_weights_release(bool period_end) noexcept;
/* Launches no record stands for: before the first window with launches, at a
 * detach or exit. Records fired before their period's end (hold full).
 * Windowed records whose launch no callback saw (activity.cpp). And launches of
 * window-less periods weighed with the period before them (window.cpp). */
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_unweighted, ga_stat_held_overflow, ga_stat_unseen,
    ga_stat_joined;
/* Of the unseen ones, those that came after a launch 65 536 ids later took their
 * entry (ga_window_period_of): late, whether noted or not cannot be told. */
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_late_records;
/* Launch callback, in a window: note the launch's period by correlation id.
 * Conversion: a record's period (its launch's; the current one, and *unseen set,
 * if no launch callback noted it), and that period's weight x 1024 once the
 * period has ended (0 before). */
GA_HIDDEN void ga_window_note_launch(uint32_t correlation_id) noexcept;
GA_HIDDEN void ga_window_note_outside(uint32_t correlation_id) noexcept; /* at a window's edge */
/* Graph replays CUPTI mis-times (window.cpp): the last traced replay of each
 * graph node in a window is left out. activity.cpp, at the period's weighing
 * (poller): marks the held records of `period` that are the newest of their
 * graph node, returns their distinct launches and sets *newest to the newest
 * correlation id among them. A record is dropped when it is one of those, or when it arrives after its period was weighed and is no older than the
 * replays left out then (ga_window_late_last_replay). */
GA_HIDDEN uint64_t ga_activity_leave_out_last_replays(uint32_t period, uint32_t *newest) noexcept;
/* activity.cpp: the newest correlation id among the held records of `period` (0: none). */
GA_HIDDEN uint32_t ga_activity_newest_held(uint32_t period) noexcept;
GA_HIDDEN bool ga_window_late_last_replay(uint32_t period, uint32_t correlation_id) noexcept;
GA_HIDDEN extern std::atomic<uint64_t> ga_stat_left_out_launches, ga_stat_left_out_records,
    ga_stat_left_out_late;
/* *outside: a launch callback saw it at a window's edge (GA_WIN_EDGE); *unseen
 * is set then too. *late: unseen, and its entry went to a launch 65 536 ids
 * later before the record came. */
GA_HIDDEN uint32_t ga_window_period_of(uint32_t correlation_id, bool *unseen, bool *outside, bool *late) noexcept;
/* activity.cpp: while windows are on, converted records whose period has not
 * ended wait; this fires those whose weight is now known, and with `all` the
 * rest too, at fallback_q (x 1024; 0: N). */
GA_HIDDEN void ga_activity_fire_held(bool all, uint32_t fallback_q) noexcept;
/* held.cpp fires a batch of converted records (with the CUPTI drops pending:
 * ga_batch_dropped adds to them); emit fires them now or holds them for their
 * period's weight (true if any went). */
GA_HIDDEN void ga_fire_batch(const struct ga_kernel_record *recs, uint32_t n) noexcept;
GA_HIDDEN void ga_batch_dropped(uint64_t n) noexcept;
GA_HIDDEN void ga_published(uint64_t until_ns, bool final) noexcept; /* the `published` probe */
GA_HIDDEN bool ga_batch_dropped_pending(void) noexcept;
GA_HIDDEN bool ga_activity_emit(struct ga_kernel_record *recs, uint32_t *periods, uint32_t n, bool windows) noexcept;
GA_HIDDEN void ga_held_atfork_child(void) noexcept;
/* held.cpp: the published weights, x GA_WQ, per period number (ga_period_seq: the
 * current one; weights.cpp moves it on): 0 before its period's is published; a
 * period long gone takes the last published, or the default (the current N). */
#define GA_WQ 1024u
#define GA_QRING 256u
GA_HIDDEN extern std::atomic<uint32_t> ga_period_seq;
/* q and the span its records stand for (ga_kernel_record.span_*) */
GA_HIDDEN void ga_weight_publish(uint32_t period, uint32_t q, uint64_t span_start, uint64_t span_end) noexcept;
GA_HIDDEN void ga_weight_set_default(uint32_t q) noexcept;
GA_HIDDEN uint32_t ga_weight_of(uint32_t period) noexcept;
#include "bench/hooks.h" /* the benchmark build's hooks: the one seam (shim/src/bench/) */
GA_HIDDEN const char *ga_name_of(uint64_t kernel_id) noexcept; /* names.cpp; NULL if unknown */
/* activity.cpp: "name (n), ..." of the first kernels whose windowed records had no
 * launch callback (ga_window_period_of), for the exit line; "" if none. */
GA_HIDDEN void ga_unseen_kernels(char *buf, size_t size) noexcept;
GA_HIDDEN void ga_sampler_new_window(void) noexcept;        /* callbacks.cpp */

#endif
