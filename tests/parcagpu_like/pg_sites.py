"""Launches mock kernels from two Python call sites in a known 3:1 ratio, once the
parcagpu-shaped library's cuda_correlation semaphore is up (an agent attached).

  python pg_sites.py LIB ITERS TESTS_DIR [PAUSE_S] [GO_FILE]
  (LIB: pglike's path; prints what it launched as JSON. With GO_FILE, it also waits
  for that file: another agent on the host may have raised the semaphore first.)
With PG_SITES_CUBIN=PATH and PG_SITES_KERNEL=NAME=NS@PCS the module is that real
cubin, its kernel NAME the one launched (sampled on PCS by the mock's PC sampling),
after one launch of k_warm. With PG_SITES_LINGER_S=S it waits S seconds after the
loop before it exits, and with PG_SITES_LINGER_UNTIL=FILE until FILE exists (60 s at
most: the test makes it once the agent's profiles hold every launch).
"""

import ctypes
import json
import os
import sys
import time

sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else ".")
from py_sites import lib, site_a, site_b  # noqa: E402  (the same 3:1 call sites)
from py_workload import check  # noqa: E402


def main():
    iters = int(sys.argv[2])
    check(lib.cuInit(0), "cuInit")  # loads the injection library
    sem = ctypes.c_ushort.in_dll(ctypes.CDLL(sys.argv[1]), "parcagpu_cuda_correlation_semaphore")
    deadline = time.monotonic() + 60
    while not sem.value and time.monotonic() < deadline:
        time.sleep(0.05)
    if not sem.value:
        raise SystemExit("pg_sites: no agent raised the semaphore")
    go = sys.argv[5] if len(sys.argv) > 5 else None
    while go and not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    # The agent sets up Python stacks when it first hears of the process (its first
    # probe, below: cuInit fires none); a long-running job gives it that moment.
    lib.cuDeviceGet(ctypes.byref(ctypes.c_int()), 0)
    dev, ctx, mod, f = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    image, name, first = "k_pg=2500\n", "k_pg", f
    if os.environ.get("PG_SITES_CUBIN"):
        kernel = os.environ["PG_SITES_KERNEL"]
        image = f"cubin={os.environ['PG_SITES_CUBIN']}\n{kernel}\nk_warm=1000\n"
        name, first = kernel.split("=", 1)[0], ctypes.c_void_p()
    check(lib.cuModuleLoadData(ctypes.byref(mod), image.encode() + b"\0"), "cuModuleLoadData")
    check(lib.cuModuleGetFunction(ctypes.byref(f), mod, name.encode()), "cuModuleGetFunction")
    if first is not f:
        check(lib.cuModuleGetFunction(ctypes.byref(first), mod, b"k_warm"), "cuModuleGetFunction")
    lib.cuLaunchKernel(first, 1, 1, 1, 1, 1, 1, 0, None, None, None)  # the agent hears of us
    lib.cuCtxSynchronize()
    time.sleep(float(sys.argv[4]) if len(sys.argv) > 4 else 1.0)
    for _ in range(iters):
        site_a(f)
        site_b(f)
    lib.cuCtxSynchronize()
    time.sleep(float(os.environ.get("PG_SITES_LINGER_S", "0")))  # before the exit's flush
    until, deadline = os.environ.get("PG_SITES_LINGER_UNTIL"), time.monotonic() + 60
    while until and not os.path.exists(until) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"launches": 4 * iters + 1, "gpu_ns": (4 * iters + 1) * 2500}))


if __name__ == "__main__":
    main()
