/* devices.cpp: the gpu_device probe. For each CUDA device of the process: its
 * ordinal, its UUID written as nvidia-smi and DCGM write it, its model name, and
 * one reading of CUPTI's clock and CLOCK_REALTIME taken together (the agent maps
 * kernel records' times to wall-clock time with it). Runs on the poller thread,
 * never inside cuInit or a CUPTI callback; the driver's device queries need no
 * context. */
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>

#include <cuda.h>

#include "ga_probes.h"
#include "ga_internal.h"

typedef CUresult (*count_fn)(int *);
typedef CUresult (*get_fn)(CUdevice *, int);
typedef CUresult (*uuid_fn)(CUuuid *, CUdevice);
typedef CUresult (*name_fn)(char *, int, CUdevice);

static void *driver_sym(const char *name) {
    static void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *p = h ? dlsym(h, name) : nullptr;
    return p ? p : dlsym(RTLD_DEFAULT, name);
}

bool ga_announce_devices(void) noexcept {
    count_fn count = (count_fn)driver_sym("cuDeviceGetCount");
    get_fn get = (get_fn)driver_sym("cuDeviceGet");
    uuid_fn uuid = (uuid_fn)driver_sym("cuDeviceGetUuid_v2");
    if (!uuid) uuid = (uuid_fn)driver_sym("cuDeviceGetUuid");
    name_fn name = (name_fn)driver_sym("cuDeviceGetName");
    int n = 0;
    CUresult r = count && get ? count(&n) : CUDA_ERROR_NOT_FOUND;
    if (r != CUDA_SUCCESS) {
        /* CUDA_ERROR_NOT_INITIALIZED: cuInit has not returned yet (the poller's
         * first step can run inside it, on an H100 with CUDA 13); the next poll asks again. */
        ga_debug("devices not announced: cuDeviceGetCount %s (%d)", count ? "failed" : "not found", (int)r);
        return r != CUDA_ERROR_NOT_INITIALIZED;
    }
    ga_debug("announcing %d device(s)%s", n, uuid ? "" : " (no cuDeviceGetUuid)");
    for (int i = 0; i < n && i < 64; i++) {
        CUdevice dev;
        if (get(&dev, i) != CUDA_SUCCESS) continue;
        char id[GA_UUID_LEN] = "", model[GA_MODEL_LEN] = "";
        CUuuid u;
        if (uuid && uuid(&u, dev) == CUDA_SUCCESS) {
            const unsigned char *b = (const unsigned char *)u.bytes;
            snprintf(id, sizeof id,
                     "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                     b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                     b[12], b[13], b[14], b[15]);
        }
        if (!name || name(model, (int)sizeof model, dev) != CUDA_SUCCESS) model[0] = 0;
        uint64_t cupti_ns = ga_cupti_timestamp();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t realtime_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
        const char *idp = id, *modelp = model;
        ga_fire_gpu_device((uint32_t)i, idp, modelp, cupti_ns, realtime_ns);
    }
    return true;
}
