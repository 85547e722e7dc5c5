/* audit.cpp: the benchmark's audit mode (GPU_AGENT_AUDIT_FILE). CUPTI stays on
 * for the whole attachment; every kernel record is tallied here before anything
 * is left out, by whether its launch fell in a collection window, and the
 * per-kernel totals are written at exit: the same run's full trace, against which
 * `python -m bench.gpu fidelity --audit` checks the windowed estimate. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../ga_internal.h"

#define AUDIT_BITS (1ull << 30) /* correlation ids tracked (128 MiB, touched lazily) */
#define AUDIT_TAB (1u << 14)

static std::atomic<uint64_t> *g_audit_bits; /* bit set: launched inside a window */
static std::atomic<uint64_t> g_audit_untracked;

struct audit_row {
    uint64_t kernel_id;
    uint64_t launches, gpu_ns, win_launches, win_gpu_ns;
};
static pthread_mutex_t g_audit_mu = PTHREAD_MUTEX_INITIALIZER;
static audit_row *g_audit_tab;
static uint64_t g_audit_overflow;

void ga_audit_init(void) noexcept {
    if (!ga_audit_on() || g_audit_bits) return;
    /* calloc of this size is an anonymous mapping: pages cost memory only
     * once a correlation id in them is marked. */
    g_audit_bits = (std::atomic<uint64_t> *)calloc(AUDIT_BITS / 64, sizeof(uint64_t));
    g_audit_tab = (audit_row *)calloc(AUDIT_TAB, sizeof(audit_row));
    if (!g_audit_bits || !g_audit_tab) {
        ga_log("audit mode: out of memory; audit file not written");
        ga_bench.audit_file[0] = 0;
    }
}

void ga_audit_mark(uint32_t correlation_id) noexcept {
    if (!g_audit_bits) return;
    if (correlation_id >= AUDIT_BITS) {
        g_audit_untracked.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    g_audit_bits[correlation_id >> 6].fetch_or(1ull << (correlation_id & 63),
                                               std::memory_order_relaxed);
}

bool ga_audit_in_window(uint32_t correlation_id) noexcept {
    if (!g_audit_bits || correlation_id >= AUDIT_BITS) return false;
    return (g_audit_bits[correlation_id >> 6].load(std::memory_order_relaxed) >>
            (correlation_id & 63)) & 1;
}

void ga_audit_tally(uint64_t kernel_id, uint64_t ns, bool in_window) noexcept {
    if (!g_audit_tab) return;
    pthread_mutex_lock(&g_audit_mu);
    uint32_t i = (uint32_t)(kernel_id * 0x9e3779b97f4a7c15ULL >> 50) & (AUDIT_TAB - 1);
    audit_row *r = nullptr;
    for (unsigned p = 0; p < AUDIT_TAB; p++, i = (i + 1) & (AUDIT_TAB - 1)) {
        if (g_audit_tab[i].kernel_id == kernel_id || g_audit_tab[i].kernel_id == 0) {
            r = &g_audit_tab[i];
            break;
        }
    }
    if (!r) {
        g_audit_overflow++;
    } else {
        r->kernel_id = kernel_id;
        r->launches++;
        r->gpu_ns += ns;
        if (in_window) {
            r->win_launches++;
            r->win_gpu_ns += ns;
        }
    }
    pthread_mutex_unlock(&g_audit_mu);
}

/* At exit, after the final flush. Names come from the shim's name table. */
void ga_audit_write(void) noexcept {
    if (!g_audit_tab || !ga_audit_on()) return;
    FILE *f = fopen(ga_bench.audit_file, "w");
    if (!f) {
        ga_log("audit mode: cannot write %s", ga_bench.audit_file);
        return;
    }
    fprintf(f, "# gpu-agent shim audit: pid %d duty_cycle %u window_ms %u untracked %llu "
               "overflow %llu\n",
            (int)getpid(), ga_cfg.duty_cycle, ga_cfg.window_ms,
            (unsigned long long)g_audit_untracked.load(), (unsigned long long)g_audit_overflow);
    fprintf(f, "kernel_id\tlaunches\tgpu_ns\twindow_launches\twindow_gpu_ns\tname\n");
    pthread_mutex_lock(&g_audit_mu);
    for (uint32_t i = 0; i < AUDIT_TAB; i++) {
        const audit_row *r = &g_audit_tab[i];
        if (!r->kernel_id) continue;
        const char *name = ga_name_of(r->kernel_id);
        fprintf(f, "%016llx\t%llu\t%llu\t%llu\t%llu\t%s\n", (unsigned long long)r->kernel_id,
                (unsigned long long)r->launches, (unsigned long long)r->gpu_ns,
                (unsigned long long)r->win_launches, (unsigned long long)r->win_gpu_ns,
                name ? name : "?");
    }
    pthread_mutex_unlock(&g_audit_mu);
    fclose(f);
}
