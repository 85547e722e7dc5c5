/* shape_unit.cpp: shim/src/shape.cpp alone, for tests/test_shim_estimator.py (in
 * process, deterministic, in ms). Its calls are played from a script on stdin, one
 * per line, over a fake CLOCK_MONOTONIC (ms):
 *
 *   sample MS SEQ HITS EPOCH   the poller's count at MS (ga_shape_sample): the launch
 *                              callbacks' count, the counter's hits and its coverage
 *   each H0 H1 ...             the counter's hits per counted function (ga_hook_hits_each)
 *   grew MS MASK               a scan counted more slots for the functions in MASK at MS
 *                              (ga_shape_grew), with `each`'s hits then
 *   measure none|seq|hits|waiting  which count stands for the launches (ga_shape_measure;
 *                              waiting: the counter's, before its first calibration)
 *   publish S E OS OE B O A    ga_shape_publish of the span [S, E) ms: B launches
 *                              carried from before its period, O of its own in
 *                              [OS, OE), A in all
 * Each publish prints the shape it fired (the share of the span's launches before
 * each of its knots, to 4 places), or NONE (the agent spreads it by time). */
#include "ga_internal.h"
#include "ga_probes.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void capture_shape(uint64_t, uint64_t, const uint16_t *shares, uint32_t n) {
    printf("SHAPE");
    for (uint32_t i = 0; i < n; i++) printf(" %.4f", (double)shares[i] / GA_SHAPE_ONE);
    printf("\n");
}
#define ga_fire_period_shape(s, e, shares, n) (fired = true, capture_shape(s, e, shares, n))
static bool fired;

#include "../../shim/src/shape.cpp"

ga_config ga_cfg;
std::atomic<uint64_t> ga_launch_seq;
static uint64_t g_hits, g_epoch, g_fake_ns, g_each[GA_HOOK_TARGETS];
uint64_t ga_hook_hits(void) noexcept { return g_hits; }
uint32_t ga_hook_hits_each(uint64_t *out, uint32_t max) noexcept {
    for (uint32_t i = 0; i < max && i < GA_HOOK_TARGETS; i++) out[i] = g_each[i];
    return max < GA_HOOK_TARGETS ? max : GA_HOOK_TARGETS;
}
uint64_t ga_hook_epoch(void) noexcept { return g_epoch; }
extern "C" int clock_gettime(clockid_t, struct timespec *ts) noexcept {
    ts->tv_sec = (time_t)(g_fake_ns / 1000000000ull);
    ts->tv_nsec = (long)(g_fake_ns % 1000000000ull);
    return 0;
}

static const uint64_t MS_NS = 1000000;

int main(void) {
    ga_cfg.duty_cycle = 10;
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        char op[32] = "", arg[32] = "";
        double v[7] = {0};
        if (sscanf(line, "%31s", op) != 1) continue;
        if (!strcmp(op, "sample") && sscanf(line, "%*s %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3]) == 4) {
            g_fake_ns = (uint64_t)(v[0] * MS_NS);
            ga_launch_seq.store((uint64_t)v[1]);
            g_hits = (uint64_t)v[2], g_epoch = (uint64_t)v[3];
            ga_shape_sample(g_fake_ns);
        } else if (!strcmp(op, "each")) {
            int off = 0, used = 0;
            sscanf(line, "%*s%n", &off);
            memset(g_each, 0, sizeof g_each);
            for (unsigned i = 0; i < GA_HOOK_TARGETS && sscanf(line + off, "%lf%n", &v[0], &used) == 1; i++, off += used)
                g_each[i] = (uint64_t)v[0];
        } else if (!strcmp(op, "grew") && sscanf(line, "%*s %lf %lf", &v[0], &v[1]) == 2) {
            ga_shape_grew((uint64_t)(v[0] * MS_NS), (uint64_t)v[1]);
        } else if (!strcmp(op, "measure") && sscanf(line, "%*s %31s", arg) == 1) {
            ga_shape_measure(!strcmp(arg, "seq")       ? GA_SHAPE_SEQ
                             : !strcmp(arg, "hits")    ? GA_SHAPE_HITS
                             : !strcmp(arg, "waiting") ? GA_SHAPE_HITS_WAITING
                                                       : GA_SHAPE_NONE);
        } else if (!strcmp(op, "publish") && sscanf(line, "%*s %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2],
                                                    &v[3], &v[4], &v[5], &v[6]) == 7) {
            ga_published_span s = {(uint64_t)(v[0] * MS_NS), (uint64_t)(v[2] * MS_NS), (uint64_t)(v[3] * MS_NS),
                                   (uint64_t)(v[1] * MS_NS), (uint64_t)v[4], (uint64_t)v[5], (uint64_t)v[6]};
            fired = false;
            ga_shape_publish(s);
            if (!fired) printf("NONE\n");
        } else {
            fprintf(stderr, "shape_unit: cannot read: %s", line);
            return 2;
        }
    }
    return 0;
}
