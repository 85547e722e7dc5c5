"""Workload for bench/python_unwind.py: launches from a Python stack of a chosen depth.

  python py_launch.py DEPTH LAUNCHES

Calls DEPTH nested Python functions, then launches LAUNCHES mock kernels
through ctypes (GIL released) from the innermost one and prints
`ns_per_launch=<wall ns per launch>`.
"""

import ctypes
import sys
import time


def main():
    depth, n = int(sys.argv[1]), int(sys.argv[2])
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuInit(0) == 0
    assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cu.cuModuleLoadData(ctypes.byref(mod), b"k_bench=1000\n\0") == 0
    assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"k_bench") == 0
    time.sleep(0.3)  # the agent sets the process up (attach event) meanwhile
    launch = cu.cuLaunchKernel

    def leaf():
        for _ in range(200):  # warm-up
            launch(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        t0 = time.perf_counter_ns()
        for _ in range(n):
            launch(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        return (time.perf_counter_ns() - t0) / n

    def nest(k):
        return leaf() if k <= 0 else nest(k - 1)

    ns = nest(depth)
    cu.cuCtxSynchronize()
    print(f"ns_per_launch={ns:.1f}")


if __name__ == "__main__":
    main()
