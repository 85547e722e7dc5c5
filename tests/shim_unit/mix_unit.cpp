/* mix_unit.cpp: shim/src/mix.cpp alone, over a fake clock and a fake launch
 * counter, for tests/test_shim_estimator.py (in process, deterministic, in ms).
 *
 *   mix_unit POLL_MS CHANGE_MS END_MS RATE_A:SHARE_A RATE_B:SHARE_B [BURST_MS]
 *
 * One period from 0 to END_MS. Launches come at RATE_A a second before CHANGE_MS and
 * at RATE_B after it; SHARE of them through launch function 0 (cudart's
 * __cudaLaunchKernel, say), the rest through function 1 (cuBLAS's cuLaunchKernelEx).
 * BURST_MS: the two functions take turns of that long instead (SHARE is then 0.5
 * whatever was given: a job whose steps launch one kind, then the other). Every POLL_MS the poller's calls
 * are made as collection.cpp makes them (ga_mix_sample, then ga_mix_changed); at
 * END_MS a planned end asks ga_mix_changed_lately. One line:
 *   RESULT cut_ms=T since_ms=S     (ga_mix_changed at T placed the change at S)
 *   RESULT lately_ms=END since_ms=S
 *   RESULT none */
#include "../../shim/src/mix.cpp"

#include <stdio.h>
#include <stdlib.h>

ga_config ga_cfg;

static uint64_t g_hits[2];
uint64_t ga_hook_epoch(void) noexcept { return 1; }
uint32_t ga_hook_hits_each(uint64_t *out, uint32_t max) noexcept {
    uint32_t n = max < 2 ? max : 2;
    for (uint32_t i = 0; i < n; i++) out[i] = g_hits[i];
    return n;
}
void ga_weights_marks(uint64_t *in, uint32_t *corr) noexcept { *in = 0, *corr = 0; }

int main(int argc, char **argv) {
    double rate[2], share[2];
    if (argc < 6 || sscanf(argv[4], "%lf:%lf", &rate[0], &share[0]) != 2 ||
        sscanf(argv[5], "%lf:%lf", &rate[1], &share[1]) != 2) {
        fprintf(stderr, "usage: mix_unit POLL_MS CHANGE_MS END_MS RATE_A:SHARE_A RATE_B:SHARE_B [BURST_MS]\n");
        return 2;
    }
    long poll = atol(argv[1]), change = atol(argv[2]), end = atol(argv[3]), burst = argc > 6 ? atol(argv[6]) : 0;
    ga_cfg.launch_counter = ga_cfg.mix_cuts = 1;
    const uint64_t MS = 1000000;
    ga_mix_reset(0);
    double owed[2] = {0, 0};
    for (long t = 1; t <= end; t++) { /* each ms's launches, then the poll if one is due */
        int side = t > change;
        double n = rate[side] / 1000;
        double s0 = burst ? (double)((t / burst) % 2 == 0) : share[side];
        owed[0] += n * s0, owed[1] += n * (1 - s0);
        for (int i = 0; i < 2; i++) {
            uint64_t whole = (uint64_t)owed[i];
            g_hits[i] += whole, owed[i] -= (double)whole;
        }
        if (t % poll) continue;
        struct ga_mix_change c;
        ga_mix_sample((uint64_t)t * MS);
        if (t < end && ga_mix_changed(&c)) {
            printf("RESULT cut_ms=%ld since_ms=%llu\n", t, (unsigned long long)(c.since_ns / MS));
            return 0;
        }
    }
    struct ga_mix_change c;
    if (ga_mix_changed_lately(&c))
        printf("RESULT lately_ms=%ld since_ms=%llu\n", end, (unsigned long long)(c.since_ns / MS));
    else
        printf("RESULT none\n");
    return 0;
}
