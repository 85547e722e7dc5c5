// globaltimer: in-kernel events from %globaltimer, as cutedsl-trace and
// nanotrace-cuda record them, for `python -m bench.gpu globaltimer`.
//
// Usage: globaltimer OUT LAUNCHES [GAP_S [BURST]]: the second half of the launches GAP_S
// seconds after the first (how CUPTI's clock and %globaltimer drift); BURST launches
// back to back between synchronizations (default 1). Writes OUT, text:
//   res MIN_STEP_NS CHANGES SPAN_NS      one thread reading %globaltimer 1<<20 times
//   snap METHOD GLOBALTIMER RAW_LO RAW_HI  a %globaltimer read between two
//                                        CLOCK_MONOTONIC_RAW reads, the narrowest of many:
//                                        METHOD "sync": a 1-thread kernel, launch..sync (50);
//                                        "pingpong": a resident kernel stamps when the host
//                                        flips a flag in mapped memory, the host waits for its
//                                        answer (2 000). Before the launches, around the gap,
//                                        after them, and 2 s later.
//   clk REALTIME RAW                     CLOCK_REALTIME beside CLOCK_MONOTONIC_RAW, with
//                                        each snapshot (the narrowest of 20 RAW, RT, RAW)
//   cts CUPTI RT_LO RT_HI RAW_LO RAW_HI  cuptiGetTimestamp() between two CLOCK_REALTIME
//                                        reads, between two CLOCK_MONOTONIC_RAW reads (the
//                                        narrowest of 20), with each snapshot, where the
//                                        process has CUPTI (the shim loaded it)
//   ev LAUNCH CTA WARP T0 T1 T2          each warp of each launch of `work`: phase
//                                        "load" [T0, T1], "mma" [T1, T2]
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CTAS 8
#define WARPS 4

__device__ __forceinline__ uint64_t gt() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void stamp(uint64_t *out) { out[0] = gt(); }

__global__ void resolution(uint64_t *out, int n) {
    uint64_t t0 = gt(), prev = t0, min_step = ~0ull, changes = 0;
    for (int i = 0; i < n; i++) {
        uint64_t t = gt();
        if (t != prev) {
            if (t - prev < min_step) min_step = t - prev;
            changes++;
            prev = t;
        }
    }
    out[0] = min_step, out[1] = changes, out[2] = prev - t0;
}

__global__ void work(uint64_t *ev, int iters) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float acc = (float)lane;
    uint64_t t0 = gt();
    for (int i = 0; i < iters; i++) acc = acc * 1.0001f + 0.5f;
    uint64_t t1 = gt();
    for (int i = 0; i < iters * (1 + warp); i++) acc = acc * 0.9999f + 0.25f;
    uint64_t t2 = gt();
    if (lane == 0) {
        uint64_t *e = ev + ((size_t)blockIdx.x * WARPS + warp) * 4;
        e[0] = t0, e[1] = t1, e[2] = t2, e[3] = acc > 1e30f;
    }
}

static uint64_t raw_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

// A resident 1-thread kernel: for round i, waits for flag[0] == i, stamps out[i],
// answers flag[1] = i. Host memory, mapped: each side sees the other's write over PCIe.
__global__ void pingpong(volatile unsigned *flag, volatile uint64_t *out, int n) {
    for (int i = 1; i <= n; i++) {
        while (flag[0] != (unsigned)i) {
        }
        out[i] = gt();
        __threadfence_system();
        flag[1] = i;
    }
}

static void snap_pingpong(FILE *f) {
    enum { N = 2000 };
    unsigned *flag, *dflag;
    uint64_t *out, *dout;
    cudaHostAlloc((void **)&flag, 64, cudaHostAllocMapped);
    cudaHostAlloc((void **)&out, (N + 1) * 8, cudaHostAllocMapped);
    cudaHostGetDevicePointer((void **)&dflag, flag, 0);
    cudaHostGetDevicePointer((void **)&dout, out, 0);
    volatile unsigned *vf = flag;
    vf[0] = vf[1] = 0;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    pingpong<<<1, 1, 0, s>>>(dflag, dout, N);
    uint64_t best_lo = 0, best_hi = ~0ull;
    int best = 0;
    for (int i = 1; i <= N; i++) {
        uint64_t lo = raw_ns();
        vf[0] = i;
        while (vf[1] != (unsigned)i) {
            if (raw_ns() - lo > 1000000000ull) {
                fprintf(stderr, "globaltimer: the pingpong kernel did not answer round %d\n", i);
                exit(1);
            }
        }
        uint64_t hi = raw_ns();
        if (hi - lo < best_hi - best_lo) best = i, best_lo = lo, best_hi = hi;
    }
    cudaStreamSynchronize(s);
    fprintf(f, "snap pingpong %llu %llu %llu\n", (unsigned long long)((volatile uint64_t *)out)[best],
            (unsigned long long)best_lo, (unsigned long long)best_hi);
    cudaStreamDestroy(s);
    cudaFreeHost(flag);
    cudaFreeHost(out);
}

static uint64_t ns_of(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void snap_clocks(FILE *f) {
    uint64_t best_rt = 0, best_lo = 0, best_hi = ~0ull;
    for (int i = 0; i < 20; i++) {
        uint64_t lo = raw_ns(), rt = ns_of(CLOCK_REALTIME), hi = raw_ns();
        if (hi - lo < best_hi - best_lo) best_rt = rt, best_lo = lo, best_hi = hi;
    }
    fprintf(f, "clk %llu %llu\n", (unsigned long long)best_rt, (unsigned long long)((best_lo + best_hi) / 2));
}

// CUPTI's clock (that of its activity records) beside the host's: the copy the shim
// loaded, by its soname, else none (a process without the shim has no CUPTI).
static void snap_cupti(FILE *f) {
    static int (*get)(uint64_t *) = NULL;
    static int tried = 0;
    if (!tried) {
        tried = 1;
        const char *names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
        for (int i = 0; i < 3 && !get; i++) {
            void *h = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD);
            if (h) *(void **)&get = dlsym(h, "cuptiGetTimestamp");
        }
    }
    if (!get) return;
    uint64_t best[5] = {0, 0, 0, 0, ~0ull};
    for (int i = 0; i < 20; i++) {
        uint64_t c = 0, lo = raw_ns(), r0 = ns_of(CLOCK_REALTIME);
        int rc = get(&c);
        uint64_t r1 = ns_of(CLOCK_REALTIME), hi = raw_ns();
        if (rc == 0 && hi - lo < best[4] - best[3]) best[0] = c, best[1] = r0, best[2] = r1, best[3] = lo, best[4] = hi;
    }
    if (best[0])
        fprintf(f, "cts %llu %llu %llu %llu %llu\n", (unsigned long long)best[0], (unsigned long long)best[1],
                (unsigned long long)best[2], (unsigned long long)best[3], (unsigned long long)best[4]);
}

static void snap(FILE *f, uint64_t *d) {
    snap_clocks(f);
    snap_cupti(f);
    snap_pingpong(f);
    uint64_t best_gt = 0, best_lo = 0, best_hi = ~0ull;
    for (int i = 0; i < 50; i++) {
        uint64_t lo = raw_ns();
        stamp<<<1, 1>>>(d);
        cudaDeviceSynchronize();
        uint64_t hi = raw_ns(), g;
        cudaMemcpy(&g, d, 8, cudaMemcpyDeviceToHost);
        if (hi - lo < best_hi - best_lo) best_gt = g, best_lo = lo, best_hi = hi;
    }
    fprintf(f, "snap sync %llu %llu %llu\n", (unsigned long long)best_gt, (unsigned long long)best_lo,
            (unsigned long long)best_hi);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: globaltimer OUT LAUNCHES [GAP_S [BURST]]\n");
        return 2;
    }
    int launches = atoi(argv[2]);
    FILE *f = fopen(argv[1], "w");
    uint64_t *d, *ev, r[3];
    size_t per = (size_t)CTAS * WARPS * 4;
    cudaMalloc(&d, 64);
    cudaMalloc(&ev, per * launches * 8);
    resolution<<<1, 1>>>(d, 1 << 20);
    cudaMemcpy(r, d, sizeof r, cudaMemcpyDeviceToHost);
    fprintf(f, "res %llu %llu %llu\n", (unsigned long long)r[0], (unsigned long long)r[1], (unsigned long long)r[2]);
    int gap = argc >= 4 ? atoi(argv[3]) : 0, burst = argc == 5 ? atoi(argv[4]) : 1;
    if (burst < 1) burst = 1;
    snap(f, d);
    for (int i = 0; i < launches; i++) {
        if (gap && i == launches / 2) {   // the second half GAP_S later, snapshots around the gap
            snap(f, d);
            struct timespec g = {gap, 0};
            nanosleep(&g, NULL);
            snap(f, d);
        }
        work<<<CTAS, WARPS * 32>>>(ev + per * i, 2000);
        // each launch's events are its own; BURST of them back to back on one stream
        if ((i + 1) % burst == 0 || i + 1 == launches || (gap && i + 1 == launches / 2)) cudaDeviceSynchronize();
    }
    snap(f, d);
    struct timespec two = {2, 0};
    nanosleep(&two, NULL);
    snap(f, d);
    uint64_t *h = (uint64_t *)malloc(per * launches * 8);
    cudaMemcpy(h, ev, per * launches * 8, cudaMemcpyDeviceToHost);
    for (int i = 0; i < launches; i++)
        for (int c = 0; c < CTAS; c++)
            for (int w = 0; w < WARPS; w++) {
                uint64_t *e = h + per * i + ((size_t)c * WARPS + w) * 4;
                fprintf(f, "ev %d %d %d %llu %llu %llu\n", i, c, w, (unsigned long long)e[0],
                        (unsigned long long)e[1], (unsigned long long)e[2]);
            }
    fclose(f);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        fprintf(stderr, "globaltimer: %s\n", cudaGetErrorString(err));
        return 1;
    }
    return 0;
}
