"""A Python program that launches mock CUDA kernels through ctypes, for the Python-stack tests.

Runs on every CPython the tests find (3.10+), standard library only. Each
phase launches its own kernels from nested, distinctly named Python code (a
method, a lambda, a generator), so a profile's Python frames can be checked
by qualname, file and line. Lines that launch or call are tagged `# @tag`;
the tests find the line numbers by those tags.

  python py_workload.py OUT.json [--iters N] [--native-helper LIB.so]

Phases (kernel names in brackets):
  free    GIL released around the launch (ctypes.CDLL)   [k_py_free]
  held    GIL held during the launch (ctypes.PyDLL)      [k_py_held]
  threads two Python threads, different kernels          [k_thread_a, k_thread_b]
  native  a native pthread with no Python at all         [k_native]
  reuse   a code object freed and its memory reused for another function
          [k_reuse_a from alpha_fn in reuse_a.py, k_reuse_b from beta_fn_ in reuse_b.py]
"""

import ctypes
import gc
import json
import os
import sys
import threading
import time
import types

KERNELS = ["k_py_free", "k_py_held", "k_thread_a", "k_thread_b", "k_native", "k_reuse_a", "k_reuse_b"]


def launch(api, kern):
    api.cuLaunchKernel(kern, 1, 1, 1, 1, 1, 1, 0, None, None, None)  # @launch


def layer_gen(fn, n):
    for i in range(n):
        fn()  # @gen
        yield i


class Model:
    def __init__(self, api, kern):
        self.api = api
        self.kern = kern

    def forward(self, n):
        step = lambda: launch(self.api, self.kern)  # @lambda
        for _ in layer_gen(step, n):  # @forward
            pass


def run_phase(api, kern, iters):
    model = Model(api, kern)
    for _ in range(iters):
        model.forward(2)  # @run_phase


def thread_a(api, kern, iters, ctx):
    api.cuCtxSetCurrent(ctx)
    for _ in range(iters):
        launch(api, kern)  # @thread_a


def thread_b(api, kern, iters, ctx):
    api.cuCtxSetCurrent(ctx)
    for _ in range(iters):
        launch(api, kern)  # @thread_b


# Two functions whose code objects have the same size. Each round makes a
# fresh copy of alpha_fn's code (code.replace()), runs it, frees it, and at
# once makes a fresh copy of beta_fn_'s: the allocator hands beta_fn_'s code
# object the block alpha_fn's just left (LIFO free lists), same address.
SRC_A = "def alpha_fn(api, kern):\n    launch(api, kern)\n"
SRC_B = "def beta_fn_(api, kern):\n    launch(api, kern)\n"


def reuse_phase(api, kerns, rounds):
    ns = {"launch": launch}
    exec(compile(SRC_A, "reuse_a.py", "exec"), ns)
    exec(compile(SRC_B, "reuse_b.py", "exec"), ns)
    tmpl_a, tmpl_b = ns["alpha_fn"].__code__, ns["beta_fn_"].__code__
    reused = 0
    for _ in range(rounds):
        fa = types.FunctionType(tmpl_a.replace(), ns)
        addr_a = id(fa.__code__)
        fa(api, kerns["k_reuse_a"])  # @reuse_a
        time.sleep(0.05)  # the agent names alpha_fn while it is alive
        del fa
        gc.collect()
        fb = types.FunctionType(tmpl_b.replace(), ns)
        reused += id(fb.__code__) == addr_a
        fb(api, kerns["k_reuse_b"])  # @reuse_b
        time.sleep(0.05)
        del fb
        gc.collect()
    return reused


def setup(lib):
    for name in (
        "cuInit",
        "cuDeviceGet",
        "cuCtxCreate_v2",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuCtxSetCurrent",
        "cuCtxSynchronize",
    ):
        getattr(lib, name).restype = ctypes.c_int
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"py_workload: {what} failed: {rc}")


def main():
    out = sys.argv[1]
    iters = 20
    helper = None
    args = sys.argv[2:]
    while args:
        a = args.pop(0)
        if a == "--iters":
            iters = int(args.pop(0))
        elif a == "--native-helper":
            helper = args.pop(0)
    # Loaded first: the agent maps the process's libraries when its shim attaches.
    h = ctypes.CDLL(helper) if helper else None
    free = ctypes.CDLL("libcuda.so.1")  # releases the GIL around each call
    held = ctypes.PyDLL("libcuda.so.1")  # keeps it
    setup(free)
    setup(held)
    check(free.cuInit(0), "cuInit")
    dev, ctx, mod = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    check(free.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(free.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    image = "".join(f"{k}={1000 + 100 * i}\n" for i, k in enumerate(KERNELS)).encode() + b"\0"
    check(free.cuModuleLoadData(ctypes.byref(mod), image), "cuModuleLoadData")
    kerns = {}
    for k in KERNELS:
        f = ctypes.c_void_p()
        check(free.cuModuleGetFunction(ctypes.byref(f), mod, k.encode()), k)
        kerns[k] = f
    time.sleep(0.5)  # like loading a model: the agent sets the process up meanwhile

    # One call site for both: their Python stacks must come out identical.
    for api, kern in ((free, kerns["k_py_free"]), (held, kerns["k_py_held"])):
        run_phase(api, kern, iters)  # @main
    # The agent names each new stack when it sees it (the first one costs it the
    # symbol tables); let it catch up before code objects start to come and go.
    time.sleep(0.3)

    ta = threading.Thread(target=thread_a, args=(free, kerns["k_thread_a"], iters, ctx))
    tb = threading.Thread(target=thread_b, args=(free, kerns["k_thread_b"], iters, ctx))
    ta.start()
    tb.start()
    ta.join()
    tb.join()

    native = 0
    if h is not None:
        h.launch_from_native_thread.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        h.launch_from_native_thread.restype = ctypes.c_int
        native = h.launch_from_native_thread(ctx, kerns["k_native"], iters)

    reused = reuse_phase(free, kerns, 8)
    check(free.cuCtxSynchronize(), "cuCtxSynchronize")
    with open(out, "w") as f:
        json.dump(
            {"version": list(sys.version_info[:3]), "pid": os.getpid(), "reused": reused, "native_launches": native}, f
        )


if __name__ == "__main__":
    main()  # @module
