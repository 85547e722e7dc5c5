/* budget_unit.cpp: shim/src/budget.cpp alone, for tests/test_shim_estimator.py (in
 * process, deterministic, in ms). The poller's calls are played from a script on
 * stdin, one per line, as window.cpp and collection.cpp make them:
 *
 *   budget BP                  GPU_AGENT_OVERHEAD_BUDGET in basis points (default 200)
 *   tails 0|1                  ga_budget_set_tails (collection.cpp: teardowns on)
 *   stall NS teardown|switch   ga_budget_note_stall
 *   window WIN_NS WIN_LAUNCHES BASE_RATE COUNT_LAUNCHES COUNT_NS
 *                              ga_budget_note_window (BASE_RATE in launches per ns)
 *   tail CB_NS                 ga_budget_note_tail
 *   plan first|next            ga_budget_plan: prints
 *                              PLAN slots=N slot_ns=W cost=C over=K bias=B cb_ns=X
 *                              (C: the plan's own cost estimate, a fraction of its
 *                              period; K: periods over the budget so far; B: the count
 *                              phase's slowdown at the last window's count rate)
 * Nothing reads a clock: every figure comes in the script. */
#include "../../shim/src/budget.cpp"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

ga_config ga_cfg;
int ga_debug_on;
void ga_debug(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int main(void) {
    ga_cfg.budget_bp = 200;
    ga_cfg.duty_cycle = 40; /* the default: anything over 1 lets the budget plan */
    ga_cfg.window_ms = 100;
    char line[256];
    double count_rate = 0;
    while (fgets(line, sizeof(line), stdin)) {
        char op[32] = "", arg[32] = "";
        double a = 0, b = 0, c = 0, d = 0, e = 0;
        if (sscanf(line, "%31s", op) != 1) continue;
        if (!strcmp(op, "budget") && sscanf(line, "%*s %lf", &a) == 1) {
            ga_cfg.budget_bp = (uint32_t)a;
        } else if (!strcmp(op, "tails") && sscanf(line, "%*s %lf", &a) == 1) {
            ga_budget_set_tails(a != 0);
        } else if (!strcmp(op, "stall") && sscanf(line, "%*s %lf %31s", &a, arg) == 2) {
            ga_budget_note_stall((uint64_t)a, !strcmp(arg, "teardown"));
        } else if (!strcmp(op, "window") && sscanf(line, "%*s %lf %lf %lf %lf %lf", &a, &b, &c, &d, &e) == 5) {
            ga_budget_note_window((uint64_t)a, (uint64_t)b, c, (uint64_t)d, (uint64_t)e);
            count_rate = e > 0 ? d / e : 0;
        } else if (!strcmp(op, "tail") && sscanf(line, "%*s %lf", &a) == 1) {
            ga_budget_note_tail(a);
        } else if (!strcmp(op, "plan") && sscanf(line, "%*s %31s", arg) == 1) {
            uint32_t slots = 0;
            uint64_t slot_ns = 0;
            g_plan_cost = -1; /* a plan that does not price itself says so */
            ga_budget_plan(!strcmp(arg, "first"), &slots, &slot_ns);
            printf("PLAN slots=%u slot_ns=%llu cost=%.9f over=%llu bias=%.9f cb_ns=%.3f\n", slots,
                   (unsigned long long)slot_ns, g_plan_cost, (unsigned long long)ga_budget_stat_over(),
                   ga_budget_count_bias(count_rate), ga_budget_callback_ns(count_rate));
        } else {
            fprintf(stderr, "budget_unit: cannot read: %s", line);
            return 2;
        }
    }
    return 0;
}
