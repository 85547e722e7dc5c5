"""One mock kernel launched from two Python call sites in a known 3:1 ratio.

site_a launches k_add three times per step, site_b once, for SECONDS seconds, so
the truth is 75 % / 25 % of the kernel's launches and GPU time (every launch of
k_add takes the same 1000 ns on the mock's clock). The mock twin of
bench/gpu/cases.py (the `sites` case), for the per-stack share checks.

  python py_sites.py SECONDS
"""

import ctypes
import sys
import time

from py_workload import check, setup

lib = ctypes.PyDLL("libcuda.so.1")  # holds the GIL: the Python frames are current
setup(lib)


def site_a(f):
    for _ in range(3):
        lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, None)


def site_b(f):
    lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, None)


def main():
    seconds = float(sys.argv[1])
    check(lib.cuInit(0), "cuInit")
    dev, ctx, mod, f = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    check(lib.cuModuleLoadData(ctypes.byref(mod), b"k_add=1000\n\0"), "cuModuleLoadData")
    check(lib.cuModuleGetFunction(ctypes.byref(f), mod, b"k_add"), "cuModuleGetFunction")
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for _ in range(100):
            site_a(f)
            site_b(f)
    check(lib.cuCtxSynchronize(), "cuCtxSynchronize")


if __name__ == "__main__":
    main()
