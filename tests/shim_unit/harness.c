/* harness.c: a process for tests/test_shim_unit.py that plays "the CUDA
 * driver" for the shim without any CUDA:
 *   harness idle MS            never touches CUDA (LD_PRELOAD case)
 *   harness inject N MS        calls InitializeInjection N times, like cuInit
 *   harness launch ITERS MS    inject once, then ITERS launches through the
 *                              fake CUPTI ($FAKE_CUPTI), MS ms apart
 *   harness fork MS            inject, fork; the child reports, then exits
 * Prints one line: RESULT key=value ... */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cupti.h>

static int count_pollers(void) {
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[256], comm[64] = "";
        snprintf(p, sizeof(p), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(p, "r");
        if (f) {
            if (fgets(comm, sizeof(comm), f) && strncmp(comm, "ga-shim-poll", 12) == 0) n++;
            fclose(f);
        }
    }
    if (d) closedir(d);
    return n;
}

static int mapped(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int hit = 0;
    while (f && fgets(line, sizeof(line), f))
        if (strstr(line, needle)) hit = 1;
    if (f) fclose(f);
    return hit;
}

static void *shim;

static void inject(int n) {
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    if (!inj) return;
    for (int i = 0; i < n; i++) { /* the real driver dlopens the path and calls it */
        void *h = dlopen(inj, RTLD_NOW | RTLD_LOCAL);
        int (*f)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
        if (!f) { fprintf(stderr, "harness: %s\n", dlerror()); exit(3); }
        f();
        shim = h;
    }
}

static void report(const char *mode) {
    int state = -9;
    void *h = shim;
    uint64_t (*cnt)(int) = NULL;
    const char *(*cname)(int) = NULL;
    if (!h) h = dlopen("libgpu_agent_shim.so", RTLD_NOW | RTLD_NOLOAD);
    if (h) {
        int (*st)(void) = (int (*)(void))dlsym(h, "gpu_agent_shim_state");
        cnt = (uint64_t (*)(int))dlsym(h, "gpu_agent_shim_counter");
        cname = (const char *(*)(int))dlsym(h, "gpu_agent_shim_counter_name");
        if (st) state = st();
    }
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    printf("RESULT mode=%s pid=%d state=%d pollers=%d cupti_mapped=%d injection=%s", mode,
           (int)getpid(), state, count_pollers(), mapped("cupti"), inj ? inj : "-");
    /* every counter by its name (gpu_agent_shim.h); none when no shim is loaded */
    for (int i = 0; cnt && cname && cname(i); i++)
        printf(" %s=%llu", cname(i), (unsigned long long)cnt(i));
    printf("\n");
    fflush(stdout);
}

typedef void (*fake_api_t)(int, int, int, const void *, uint32_t);
typedef void (*fake_kernel_t)(const char *, uint32_t, uint64_t, uint64_t);
static fake_api_t fake_api;
static fake_kernel_t fake_kernel;
static char fA, fB;
static uint32_t corr = 1;

__attribute__((noinline)) void launch_cudaLaunchKernel(int which) {
    cudaLaunchKernel_v7000_params p;
    memset(&p, 0, sizeof(p));
    p.func = which ? &fB : &fA;
    uint32_t c = corr++;
    fake_api(2, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER, &p, c);
    cuLaunchKernel_params d;
    memset(&d, 0, sizeof(d));
    d.f = (CUfunction)(which ? &fB : &fA);
    fake_api(1, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, &d, c);
    fake_api(1, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, &d, c);
    fake_api(2, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_EXIT, &p, c);
    fake_kernel(which ? "_Z7kernelBPfi" : "_Z7kernelAPfi", c, 1000ull * c, 1000ull * c + 500);
}

__attribute__((noinline)) void launch_cuLaunchKernel(int which) {
    cuLaunchKernel_params d;
    memset(&d, 0, sizeof(d));
    d.f = (CUfunction)(which ? &fB : &fA);
    uint32_t c = corr++;
    fake_api(1, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, &d, c);
    fake_api(1, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, &d, c);
    fake_kernel(which ? "_Z7kernelBPfi" : "_Z7kernelAPfi", c, 1000ull * c, 1000ull * c + 500);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "idle";
    int a = argc > 2 ? atoi(argv[2]) : 0;
    int ms = argc > 3 ? atoi(argv[3]) : 0;
    if (!strcmp(mode, "idle")) {
        usleep(a * 1000);
        report(mode);
    } else if (!strcmp(mode, "inject")) {
        inject(a);
        usleep(ms * 1000);
        report(mode);
    } else if (!strcmp(mode, "launch")) {
        void *fc = dlopen(getenv("FAKE_CUPTI"), RTLD_NOW | RTLD_GLOBAL);
        if (!fc) { fprintf(stderr, "harness: %s\n", dlerror()); return 3; }
        fake_api = (fake_api_t)dlsym(fc, "fake_api");
        fake_kernel = (fake_kernel_t)dlsym(fc, "fake_kernel");
        inject(1);
        for (int i = 0; i < a; i++) {
            if (i & 1) launch_cudaLaunchKernel((i >> 1) & 1);
            else launch_cuLaunchKernel((i >> 1) & 1);
            if (ms) usleep(ms * 1000);
        }
        report(mode);
    } else if (!strcmp(mode, "fork")) {
        inject(1);
        usleep(ms * 1000);
        pid_t pid = fork();
        if (pid == 0) {
            usleep(ms * 1000);
            report("child");
            exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        report(mode);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 99;
    }
    return 0;
}
