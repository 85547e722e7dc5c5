/* config.cpp: the shim's settings (GPU_AGENT_* environment variables, read once
 * per process) and its log lines on stderr. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "ga_internal.h"

extern char **environ;

ga_config ga_cfg = {64, 8, 100, 1000, 40, 100, 64, 0, 16, 256, 1, 1, 1, 1, 200, 0};
int ga_debug_on;

/* ------------------------------------------------------------------ */
/* logging                                                             */

static void vlog(const char *fmt, va_list ap) {
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "gpu-agent-shim: ");
    int m = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
    if (m < 0) return;
    size_t len = (size_t)n + ((size_t)m < sizeof(buf) - n - 1 ? (size_t)m : sizeof(buf) - n - 2);
    buf[len++] = '\n';
    ssize_t w = write(2, buf, len); /* one write: lines from processes do not interleave */
    (void)w;
}

void ga_log(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}

void ga_debug(const char *fmt, ...) {
    if (!ga_debug_on) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(fmt, ap);
    va_end(ap);
}


/* ------------------------------------------------------------------ */
/* configuration                                                       */

static const char *const k_known_env[] = {
    "GPU_AGENT_SAMPLE_PERIOD", "GPU_AGENT_GRAPH_SAMPLE_PERIOD", "GPU_AGENT_POLL_MS",
    "GPU_AGENT_FLUSH_MS",      "GPU_AGENT_DEBUG",               "GPU_AGENT_CUPTI_PATH",
    "GPU_AGENT_DUTY_CYCLE",    "GPU_AGENT_WINDOW_MS",           "GPU_AGENT_BUFFER_POOL_MB",
    "GPU_AGENT_PC_SAMPLING",   "GPU_AGENT_PC_SAMPLING_PERIOD",  "GPU_AGENT_PC_CUBIN_MB",
    "GPU_AGENT_PC_SAMPLING_EVERY", "GPU_AGENT_TEARDOWN",      "GPU_AGENT_OVERHEAD_BUDGET",
    "GPU_AGENT_LAUNCH_COUNTER",
    "GPU_AGENT_MIX_CUTS",
#ifdef GA_BENCH_BUILD
    "GPU_AGENT_AUDIT_FILE",    "GPU_AGENT_EXP_HOLD",            "GPU_AGENT_EXP_TOGGLE_MS",
    "GPU_AGENT_EXP_CALLBACKS", "GPU_AGENT_EXP_INTERNAL_LAUNCHES", "GPU_AGENT_EXP_SUBSCRIBE",
#endif
    /* read by the agent CLI, not by the shim: known, so never reported */
    "GPU_AGENT_SHIM",          "GPU_AGENT_BPF_DIR",             "GPU_AGENT_INCLUDE_DIR",
};

/* Adds "NAME=VALUE" to the one-line list of invalid settings. */
static void note_bad(char *bad, size_t bad_len, const char *name, const char *v) {
    size_t cur = strlen(bad);
    snprintf(bad + cur, bad_len - cur, "%s%s=%s", cur ? ", " : "", name, v);
}

static void env_u32(const char *name, uint32_t *out, uint32_t lo, uint32_t hi, char *bad,
                    size_t bad_len) {
    const char *v = getenv(name);
    if (!v || !*v) return;
    char *end = nullptr;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || !end || *end || x < lo || x > hi) {
        note_bad(bad, bad_len, name, v);
        return;
    }
    *out = (uint32_t)x;
}

/* A percentage with up to two decimals ("2", "0.5"), in basis points. */
static void env_bp(const char *name, uint32_t *out, uint32_t lo, uint32_t hi, char *bad, size_t bad_len) {
    const char *v = getenv(name);
    if (!v || !*v) return;
    char *end = nullptr;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || !end || *end || !(x * 100 >= lo && x * 100 <= hi)) {
        note_bad(bad, bad_len, name, v);
        return;
    }
    *out = (uint32_t)(x * 100 + 0.5);
}

bool ga_secure_exec(void) noexcept { return getauxval(AT_SECURE) != 0; }

void ga_read_config(void (*bench)(char *bad, size_t bad_size) noexcept) noexcept {
    const char *dbg = getenv("GPU_AGENT_DEBUG");
    /* 1 (or any other word): the debug lines; 2: also one line per collection period */
    ga_debug_on = dbg && *dbg && strcmp(dbg, "0") != 0 ? (strcmp(dbg, "2") == 0 ? 2 : 1) : 0;

    char bad[256] = "";
    env_u32("GPU_AGENT_SAMPLE_PERIOD", &ga_cfg.sample_period, 1, 1u << 30, bad, sizeof(bad));
    env_u32("GPU_AGENT_GRAPH_SAMPLE_PERIOD", &ga_cfg.graph_sample_period, 1, 1u << 30, bad,
            sizeof(bad));
    env_u32("GPU_AGENT_POLL_MS", &ga_cfg.poll_ms, 1, 3600000, bad, sizeof(bad));
    env_u32("GPU_AGENT_FLUSH_MS", &ga_cfg.flush_ms, 1, 3600000, bad, sizeof(bad));
    env_u32("GPU_AGENT_DUTY_CYCLE", &ga_cfg.duty_cycle, 1, 100000, bad, sizeof(bad));
    env_u32("GPU_AGENT_WINDOW_MS", &ga_cfg.window_ms, 1, 3600000, bad, sizeof(bad));
    env_u32("GPU_AGENT_BUFFER_POOL_MB", &ga_cfg.buffer_pool_mb, 1, GA_BUF_MAX, bad, sizeof(bad));
    env_u32("GPU_AGENT_PC_SAMPLING", &ga_cfg.pc_sampling, 0, 1, bad, sizeof(bad));
    env_u32("GPU_AGENT_PC_SAMPLING_PERIOD", &ga_cfg.pc_period, 0, 31, bad, sizeof(bad));
    if (ga_cfg.pc_period && ga_cfg.pc_period < 5) {
        note_bad(bad, sizeof(bad), "GPU_AGENT_PC_SAMPLING_PERIOD", getenv("GPU_AGENT_PC_SAMPLING_PERIOD"));
        ga_cfg.pc_period = 16;
    }
    env_u32("GPU_AGENT_PC_CUBIN_MB", &ga_cfg.pc_cubin_mb, 0, 65536, bad, sizeof(bad));
    env_u32("GPU_AGENT_PC_SAMPLING_EVERY", &ga_cfg.pc_every, 1, 100000, bad, sizeof(bad));
    env_u32("GPU_AGENT_TEARDOWN", &ga_cfg.teardown, 0, 1, bad, sizeof(bad));
    env_u32("GPU_AGENT_LAUNCH_COUNTER", &ga_cfg.launch_counter, 0, 1, bad, sizeof(bad));
    env_u32("GPU_AGENT_MIX_CUTS", &ga_cfg.mix_cuts, 0, 1, bad, sizeof(bad));
    env_bp("GPU_AGENT_OVERHEAD_BUDGET", &ga_cfg.budget_bp, 1, 10000, bad, sizeof(bad));
    /* expert overrides of the budget's schedule (budget.cpp) */
    const char *dc = getenv("GPU_AGENT_DUTY_CYCLE"), *wm = getenv("GPU_AGENT_WINDOW_MS");
    ga_cfg.fixed_schedule = (dc && *dc) || (wm && *wm);
#ifdef GA_BENCH_BUILD
    if (bench) bench(bad, sizeof(bad));
#else
    (void)bench;
    /* The benchmark build's settings (shim/src/bench/): named apart from unknown
     * names, so that a benchmark run on the wrong shim says so. */
    char bench_only[256] = "";
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, "GPU_AGENT_EXP_", 14) || !strncmp(*e, "GPU_AGENT_AUDIT_FILE=", 21)) {
            size_t cur = strlen(bench_only), nlen = strcspn(*e, "=");
            if (cur + nlen + 3 < sizeof(bench_only))
                snprintf(bench_only + cur, sizeof(bench_only) - cur, "%s%.*s", cur ? ", " : "",
                         (int)nlen, *e);
        }
    if (bench_only[0])
        ga_log("%s ignored: only the benchmark build of the shim (make shim-bench) has them",
               bench_only);
#endif

    /* unknown GPU_AGENT_* names and invalid values: one line in all */
    char unknown[384] = "";
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "GPU_AGENT_", 10) != 0) continue;
        /* gpu-agent run's own settings (GPU_AGENT_RUN_<FLAG>, agent/gpu_agent/commands/config.py) */
        if (strncmp(*e, "GPU_AGENT_RUN_", 14) == 0) continue;
#ifndef GA_BENCH_BUILD
        if (!strncmp(*e, "GPU_AGENT_EXP_", 14) || !strncmp(*e, "GPU_AGENT_AUDIT_FILE=", 21)) continue;
#endif
        const char *eq = strchr(*e, '=');
        size_t nlen = eq ? (size_t)(eq - *e) : strlen(*e);
        bool known = false;
        for (const char *k : k_known_env)
            if (strlen(k) == nlen && strncmp(k, *e, nlen) == 0) known = true;
        if (known) continue;
        size_t cur = strlen(unknown);
        if (cur + nlen + 3 < sizeof(unknown))
            snprintf(unknown + cur, sizeof(unknown) - cur, "%s%.*s", cur ? ", " : "", (int)nlen,
                     *e);
    }
    if (unknown[0] && bad[0])
        ga_log("unknown environment variable(s) ignored: %s; invalid value(s) ignored: %s",
               unknown, bad);
    else if (unknown[0])
        ga_log("unknown environment variable(s) ignored: %s", unknown);
    else if (bad[0])
        ga_log("invalid value(s) ignored: %s", bad);
}
