/* cupti_loader.cpp: lazy dlopen of libcupti and a table of its functions.
 *
 * The shim never links libcupti. Search order:
 *   1. $GPU_AGENT_CUPTI_PATH
 *   2. a libcupti already mapped in the process (e.g. by torch/kineto): the
 *      same copy must be used, two CUPTIs in one process do not mix
 *   3. next to the loaded libcudart / libcuda (dl_iterate_phdr):
 *        <dir>/, <dir>/../extras/CUPTI/lib64/, <dir>/../../cuda_cupti/lib/
 *      (toolkit layout, CUDA extras, pip nvidia/cuda_cupti/lib layout): the
 *      CUPTI that belongs to the CUDA the application actually uses
 *   4. libcupti.so, libcupti.so.13, libcupti.so.12 (loader search path) */
#include <dlfcn.h>
#include <stdio.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

#include "ga_internal.h"

ga_cupti_table ga_cupti;
void *ga_cupti_handle;

static const char *const k_sonames[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};

struct find_ctx {
    const char *needle;
    char path[1024];
};

static int find_loaded(struct dl_phdr_info *info, size_t, void *arg) {
    find_ctx *c = (find_ctx *)arg;
    const char *name = info->dlpi_name;
    if (!name || !*name) return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, c->needle, strlen(c->needle)) == 0) {
        size_t n = strlen(name);
        if (n < sizeof(c->path)) {
            memcpy(c->path, name, n + 1);
            return 1;
        }
    }
    return 0;
}

static bool loaded_path(const char *needle, char *out, size_t out_len) {
    find_ctx c;
    c.needle = needle;
    c.path[0] = 0;
    if (!dl_iterate_phdr(find_loaded, &c) || !c.path[0]) return false;
    size_t n = strlen(c.path);
    if (n >= out_len) return false;
    memcpy(out, c.path, n + 1);
    return true;
}

static void *try_open(const char *path, char *path_out, size_t path_len) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h && path_out && path_len) {
        size_t n = strlen(path);
        if (n >= path_len) n = path_len - 1;
        memcpy(path_out, path, n);
        path_out[n] = 0;
    }
    return h;
}

static void *try_dir(const char *dir, const char *rel, char *path_out, size_t path_len) {
    char buf[1200];
    for (const char *so : k_sonames) {
        int n = snprintf(buf, sizeof(buf), "%s/%s%s", dir, rel, so);
        if (n <= 0 || (size_t)n >= sizeof(buf)) continue;
        void *h = try_open(buf, path_out, path_len);
        if (h) return h;
    }
    return nullptr;
}

static void *open_cupti(char *path_out, size_t path_len) {
    const char *env = ga_secure_exec() ? nullptr : getenv("GPU_AGENT_CUPTI_PATH");
    if (env && *env) return try_open(env, path_out, path_len);  /* explicit: no fallback */

    char lp[1024];
    if (loaded_path("libcupti.so", lp, sizeof(lp))) {
        void *h = try_open(lp, path_out, path_len);
        if (h) return h;
    }
    static const char *const libs[] = {"libcudart.so", "libcuda.so"};
    static const char *const rels[] = {"", "../extras/CUPTI/lib64/", "../../cuda_cupti/lib/"};
    for (const char *lib : libs) {
        if (!loaded_path(lib, lp, sizeof(lp))) continue;
        char *slash = strrchr(lp, '/');
        if (!slash) continue;
        *slash = 0;
        for (const char *rel : rels) {
            void *h = try_dir(lp, rel, path_out, path_len);
            if (h) return h;
        }
    }
    for (const char *so : k_sonames) {
        void *h = try_open(so, path_out, path_len);
        if (h) return h;
    }
    return nullptr;
}

bool ga_cupti_load(const char **why, char *path_out, size_t path_len) noexcept {
    if (ga_cupti_handle) return true;
    void *h = open_cupti(path_out, path_len);
    if (!h) {
        *why = "libcupti not found (set GPU_AGENT_CUPTI_PATH)";
        return false;
    }
    ga_cupti_table t;
    memset(&t, 0, sizeof(t));
#define SYM(field, name)                                                  \
    do {                                                                  \
        *(void **)&t.field = dlsym(h, name);                              \
        if (!t.field) {                                                   \
            *why = "libcupti lacks " name;                                \
            dlclose(h);                                                   \
            return false;                                                 \
        }                                                                 \
    } while (0)
    SYM(Subscribe, "cuptiSubscribe");
    SYM(Unsubscribe, "cuptiUnsubscribe");
    SYM(EnableCallback, "cuptiEnableCallback");
    SYM(ActivityEnable, "cuptiActivityEnable");
    SYM(ActivityDisable, "cuptiActivityDisable");
    SYM(ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks");
    SYM(ActivityGetNextRecord, "cuptiActivityGetNextRecord");
    SYM(ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
    SYM(ActivityFlushAll, "cuptiActivityFlushAll");
    SYM(Finalize, "cuptiFinalize");
#undef SYM
    *(void **)&t.GetResultString = dlsym(h, "cuptiGetResultString");
    *(void **)&t.GetVersion = dlsym(h, "cuptiGetVersion");
    *(void **)&t.GetTimestamp = dlsym(h, "cuptiGetTimestamp");
    *(void **)&t.GetGraphNodeId = dlsym(h, "cuptiGetGraphNodeId");
    *(void **)&t.SubscribeV2 = dlsym(h, "cuptiSubscribe_v2");
    ga_cupti = t;
    ga_cupti_handle = h;
    return true;
}

const char *ga_cupti_err(CUptiResult r) noexcept {
    const char *s = nullptr;
    if (ga_cupti.GetResultString && ga_cupti.GetResultString(r, &s) == CUPTI_SUCCESS && s)
        return s;
    return "CUPTI error";
}
