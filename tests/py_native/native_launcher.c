/* Launches kernels from a pthread that never runs Python (like PyTorch's
 * autograd engine threads), for tests/test_python_stacks.py. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef int (*set_ctx_fn)(void *);

struct job { void *ctx; void *func; int n; int done; };

__attribute__((noinline)) static void *native_worker(void *arg)
{
    struct job *j = arg;
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cuda) return NULL;
    launch_fn launch = (launch_fn)dlsym(cuda, "cuLaunchKernel");
    set_ctx_fn set_ctx = (set_ctx_fn)dlsym(cuda, "cuCtxSetCurrent");
    if (!launch || !set_ctx) return NULL;
    set_ctx(j->ctx);
    for (int i = 0; i < j->n; i++)
        if (launch(j->func, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) == 0) j->done++;
    return NULL;
}

int launch_from_native_thread(void *ctx, void *func, int n)
{
    struct job j = {ctx, func, n, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, native_worker, &j) != 0) return -1;
    pthread_join(t, NULL);
    return j.done;
}
