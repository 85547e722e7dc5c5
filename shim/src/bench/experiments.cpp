/* experiments.cpp: the benchmark build's knobs (GA_BENCH_BUILD; `make shim-bench`).
 * None of this is in the shim that users inject: these settings only serve
 * bench/gpu, which uses them to break the shim's cost down or to check its
 * estimates against a full trace (audit.cpp). Estimates are wrong under some of
 * them. Read once with the other settings (shim.cpp hands ga_bench_read_config to config.cpp).
 *   GPU_AGENT_AUDIT_FILE=path   audit mode (audit.cpp; window.cpp explains it)
 *   GPU_AGENT_EXP_TOGGLE_MS=ON[:OFF]  while an agent is attached, act attached ON
 *                               ms, then detached OFF ms (default ON), repeating,
 *                               on CLOCK_MONOTONIC: an in-process A/B
 *   GPU_AGENT_EXP_CALLBACKS=windowed  launch callbacks follow the windows
 *                               (records then weigh N)
 *   GPU_AGENT_EXP_CALLBACKS=runtime   the runtime domain's launch callbacks too
 *   GPU_AGENT_EXP_INTERNAL_LAUNCHES=1 CUPTI's INTERNAL_LAUNCH_API activity (driver
 *                               launches outside any public API) with the windows
 *   GPU_AGENT_EXP_HOLD=activity kernel activity on for the whole attachment
 *   GPU_AGENT_EXP_SUBSCRIBE=late|poller  with teardowns, late: CUPTI is subscribed again only
 *                               for the count phase, not right after the teardown:
 *                               nothing of CUPTI between windows (graphs captured
 *                               there lose their capture stacks) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ga_internal.h"

ga_bench_config ga_bench;
std::atomic<uint64_t> ga_stat_internal_launches;

static void note(char *bad, size_t size, const char *what) {
    size_t cur = strlen(bad);
    snprintf(bad + cur, size - cur, "%s%s", cur ? ", " : "", what);
}

void ga_bench_read_config(char *bad, size_t bad_size) noexcept {
    char what[300];
    const char *tog = getenv("GPU_AGENT_EXP_TOGGLE_MS");
    if (tog && *tog) {
        unsigned on = 0, off = 0;
        int n = sscanf(tog, "%u:%u", &on, &off);
        if (n >= 1 && on > 0) {
            ga_bench.exp_on_ms = on;
            ga_bench.exp_off_ms = n == 2 && off ? off : on;
        } else {
            snprintf(what, sizeof(what), "GPU_AGENT_EXP_TOGGLE_MS=%s", tog);
            note(bad, bad_size, what);
        }
    }
    const char *cbs = getenv("GPU_AGENT_EXP_CALLBACKS");
    if (cbs && !strcmp(cbs, "windowed")) ga_bench.exp_cb_windowed = 1;
    else if (cbs && !strcmp(cbs, "runtime")) ga_bench.exp_cb_runtime = 1;
    else if (cbs && *cbs) {
        snprintf(what, sizeof(what), "GPU_AGENT_EXP_CALLBACKS=%s", cbs);
        note(bad, bad_size, what);
    }
    const char *internal = getenv("GPU_AGENT_EXP_INTERNAL_LAUNCHES");
    if (internal && !strcmp(internal, "1")) ga_bench.exp_internal = 1;
    else if (internal && *internal && strcmp(internal, "0")) {
        snprintf(what, sizeof(what), "GPU_AGENT_EXP_INTERNAL_LAUNCHES=%s", internal);
        note(bad, bad_size, what);
    }
    const char *hold = getenv("GPU_AGENT_EXP_HOLD");
    ga_bench.exp_hold_activity = hold && !strcmp(hold, "activity");
    const char *sub = getenv("GPU_AGENT_EXP_SUBSCRIBE");
    ga_bench.exp_late_subscribe = sub && !strcmp(sub, "late");
    if (sub && *sub && !ga_bench.exp_late_subscribe && strcmp(sub, "poller")) { /* poller: the default */
        snprintf(what, sizeof(what), "GPU_AGENT_EXP_SUBSCRIBE=%s", sub);
        note(bad, bad_size, what);
    }
    const char *count = getenv("GPU_AGENT_EXP_COUNT");
    ga_bench.exp_count_cycle = !count ? 0 : !strcmp(count, "cycle") ? 1 : !strcmp(count, "cycle-edge") ? 2 : 0;
    if (count && *count && !ga_bench.exp_count_cycle && strcmp(count, "phase")) { /* phase: the default */
        snprintf(what, sizeof(what), "GPU_AGENT_EXP_COUNT=%s", count);
        note(bad, bad_size, what);
    }
    const char *audit = getenv("GPU_AGENT_AUDIT_FILE");
    if (audit && *audit && ga_secure_exec()) {
        ga_log("GPU_AGENT_AUDIT_FILE ignored: a privileged (setuid) process takes no path from "
               "its environment");
    } else if (audit && *audit) {
        if (strlen(audit) < sizeof(ga_bench.audit_file)) strcpy(ga_bench.audit_file, audit);
        else note(bad, bad_size, "GPU_AGENT_AUDIT_FILE (path too long)");
    }
}

bool ga_exp_toggled_off(uint64_t now_ns) noexcept {
    return ga_bench.exp_on_ms &&
           now_ns / 1000000ull % (ga_bench.exp_on_ms + ga_bench.exp_off_ms) >= ga_bench.exp_on_ms;
}

void ga_exp_internal_activity(bool on) noexcept {
    if (!ga_bench.exp_internal) return;
    CUptiResult r = on ? ga_cupti.ActivityEnable(CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API)
                       : ga_cupti.ActivityDisable(CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API);
    if (r != CUPTI_SUCCESS)
        ga_debug("INTERNAL_LAUNCH_API activity %s: %s", on ? "on" : "off", ga_cupti_err(r));
}
