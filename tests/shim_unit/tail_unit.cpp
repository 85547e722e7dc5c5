/* tail_unit.cpp: shim/src/tail.cpp alone, for tests/test_shim_estimator.py (in
 * process, deterministic). The poller's and the buffer callbacks' calls are played
 * from a script on stdin, one per line, as collection.cpp and activity.cpp make
 * them; times are CUPTI ns:
 *
 *   open TS                       a window opens at TS (ga_tail_window_opened)
 *   begin NOW WIN_NS WIN_N CLOSE  it closes into its tail: WIN_N launches counted in
 *                                 WIN_NS, its callbacks off at CUPTI time CLOSE
 *                                 (ga_tail_begin; 0: no CUPTI clock)
 *   end NOW                       the tail ends (ga_tail_end)
 *   rec seen|unseen START N       N records whose kernels started at START, as one
 *                                 buffer delivers them: prints
 *                                 REC window=W tail=T (how many of each)
 *   fold                          ga_tail_fold: prints NOTE cb_ns=X for a measure
 * and at the end STATS tails=T launches=L (ga_tail_stats). No clock is read: the
 * busy clock stands still (0), so a tail's measure is on the wall clock given. */
#include "../../shim/src/tail.cpp"

#include <string.h>

uint64_t ga_busy_now(void) noexcept { return 0; }
void ga_budget_note_tail(double cb_ns) noexcept { printf("NOTE cb_ns=%.1f\n", cb_ns); }

int main(void) {
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        char op[32] = "", arg[32] = "";
        unsigned long long a = 0, b = 0, c = 0, d = 0;
        if (sscanf(line, "%31s", op) != 1) continue;
        if (!strcmp(op, "open") && sscanf(line, "%*s %llu", &a) == 1) {
            ga_tail_window_opened(a);
        } else if (!strcmp(op, "begin") && sscanf(line, "%*s %llu %llu %llu %llu", &a, &b, &c, &d) == 4) {
            ga_tail_begin(a, b, c, 0, d);
        } else if (!strcmp(op, "end") && sscanf(line, "%*s %llu", &a) == 1) {
            ga_tail_end(a);
        } else if (!strcmp(op, "rec") && sscanf(line, "%*s %31s %llu %llu", arg, &a, &b) == 3) {
            unsigned long long win = 0, tail = 0;
            for (unsigned long long i = 0; i < b; i++) (ga_tail_record(!strcmp(arg, "unseen"), a) ? tail : win)++;
            printf("REC window=%llu tail=%llu\n", win, tail);
        } else if (!strcmp(op, "fold")) {
            ga_tail_fold();
        } else {
            fprintf(stderr, "bad line: %s", line);
            return 2;
        }
    }
    uint64_t tails, launches;
    ga_tail_stats(&tails, &launches);
    printf("STATS tails=%llu launches=%llu\n", (unsigned long long)tails, (unsigned long long)launches);
    return 0;
}
