/* weights_unit.cpp: shim/src/weights.cpp alone, for tests/test_shim_estimator.py (in
 * process, deterministic, in ms). The poller's calls are played from a script on
 * stdin, one per line, over a fake CLOCK_MONOTONIC (ms):
 *
 *   launch ALL IN        ALL launches counted (ga_launch_seq), IN of them in the
 *                        window (ga_stat_launches)
 *   edge first|next MS   a period starts at MS (ga_weights_period_edge with 10 slots,
 *                        no extrapolation: the counts are the launches), then the
 *                        flush after it releases what is due (ga_weights_release)
 *   split MS N           window.cpp's ga_weights_split: the next edge gives the part
 *                        of the ending period before MS, about N launches, to the
 *                        pending one
 *   hand MS N            window.cpp's ga_weights_hand_on: the next edge gives the
 *                        part after MS, about N launches, to the period after
 *   exit MS              a detach or exit at MS (ga_weights_release(false))
 *   seq P                the current period number (window.cpp moves it on)
 *   note CORR            a launch callback in a window (ga_window_note_launch)
 *   outside CORR         one at a window's edge (ga_window_note_outside)
 *   record CORR          a kernel record's launch: prints
 *                        RECORD corr=C period=P unseen=U outside=O late=L
 * What the file publishes is printed as it goes:
 *   PUB seq=P q=Q start_ms=S end_ms=E    ga_weight_publish (Q: the weight x GA_WQ)
 *   SHAPE start_ms=S end_ms=E own_start_ms=O own_end_ms=F before=B own=N all=A
 *                                        ga_shape_publish (the span's pieces)
 *   UNTIL ms=T                            ga_weights_published_until after each call
 *   STATS unweighted=U joined=J           at the end */
#include "../../shim/src/weights.cpp"

#include <string.h>
#include <time.h>

ga_config ga_cfg;
int ga_debug_on; /* 0: weights.cpp's debug lines stay off here */
void ga_debug(const char *, ...) {}
std::atomic<uint32_t> ga_period_seq;
std::atomic<uint64_t> ga_stat_launches;

static uint64_t g_fake_ns;
extern "C" int clock_gettime(clockid_t, struct timespec *ts) noexcept {
    ts->tv_sec = (time_t)(g_fake_ns / 1000000000ull);
    ts->tv_nsec = (long)(g_fake_ns % 1000000000ull);
    return 0;
}

static const uint64_t MS_NS = 1000000;
void ga_weight_publish(uint32_t period, uint32_t q, uint64_t start, uint64_t end) noexcept {
    printf("PUB seq=%u q=%u start_ms=%.3f end_ms=%.3f\n", period, q, (double)start / MS_NS, (double)end / MS_NS);
}
void ga_shape_publish(const ga_published_span &s) noexcept {
    printf("SHAPE start_ms=%.3f end_ms=%.3f own_start_ms=%.3f own_end_ms=%.3f before=%llu own=%llu all=%llu\n",
           (double)s.start / MS_NS, (double)s.end / MS_NS, (double)s.own_start / MS_NS, (double)s.own_end / MS_NS,
           (unsigned long long)s.before, (unsigned long long)s.own, (unsigned long long)s.all);
}
void ga_weight_set_default(uint32_t) noexcept {}
void ga_weight_drop_through(uint32_t, uint32_t) noexcept {}
uint32_t ga_activity_newest_held(uint32_t) noexcept { return 0xffffffffu; } /* every record is in */
uint64_t ga_activity_leave_out_last_replays(uint32_t, uint32_t *newest) noexcept {
    *newest = 0;
    return 0; /* no graph replays */
}

int main(void) {
    ga_cfg.duty_cycle = 10;
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        char op[32] = "", arg[32] = "";
        double a = 0, b = 0;
        if (sscanf(line, "%31s", op) != 1) continue;
        if (!strcmp(op, "launch") && sscanf(line, "%*s %lf %lf", &a, &b) == 2) {
            ga_launch_seq.fetch_add((uint64_t)a);
            ga_stat_launches.fetch_add((uint64_t)b);
            continue;
        } else if (!strcmp(op, "edge") && sscanf(line, "%*s %31s %lf", arg, &a) == 2) {
            g_fake_ns = (uint64_t)(a * MS_NS);
            bool first = !strcmp(arg, "first");
            ga_weights_period_edge(first, 10, nullptr, g_fake_ns);
            if (!first) ga_weights_release(true);
        } else if (!strcmp(op, "split") && sscanf(line, "%*s %lf %lf", &a, &b) == 2) {
            ga_weights_split((uint64_t)(a * MS_NS), b, 0, 0);
            continue;
        } else if (!strcmp(op, "hand") && sscanf(line, "%*s %lf %lf", &a, &b) == 2) {
            ga_weights_hand_on((uint64_t)(a * MS_NS), b);
            continue;
        } else if (!strcmp(op, "seq") && sscanf(line, "%*s %lf", &a) == 1) {
            ga_period_seq.store((uint32_t)a);
            continue;
        } else if (!strcmp(op, "note") && sscanf(line, "%*s %lf", &a) == 1) {
            ga_window_note_launch((uint32_t)a);
            continue;
        } else if (!strcmp(op, "outside") && sscanf(line, "%*s %lf", &a) == 1) {
            ga_window_note_outside((uint32_t)a);
            continue;
        } else if (!strcmp(op, "record") && sscanf(line, "%*s %lf", &a) == 1) {
            bool unseen = false, outside = false, late = false;
            uint32_t period = ga_window_period_of((uint32_t)a, &unseen, &outside, &late);
            printf("RECORD corr=%u period=%u unseen=%d outside=%d late=%d\n", (uint32_t)a, period, unseen, outside,
                   late);
            continue;
        } else if (!strcmp(op, "exit") && sscanf(line, "%*s %lf", &a) == 1) {
            g_fake_ns = (uint64_t)(a * MS_NS);
            ga_weights_release(false);
        } else {
            fprintf(stderr, "weights_unit: cannot read: %s", line);
            return 2;
        }
        printf("UNTIL ms=%.3f\n", (double)ga_weights_published_until() / MS_NS);
    }
    printf("STATS unweighted=%llu joined=%llu\n", (unsigned long long)ga_stat_unweighted.load(),
           (unsigned long long)ga_stat_joined.load());
    return 0;
}
