"""A kernel with a known hot loop, sampled by the mock's PC Sampling API, launched
from two Python call sites in a known 3:1 ratio.

The module's "cubin" is tests/data/pcsampling/hot_loop_sm90.cubin, the real cubin of
bench/gpu/pc_sampling.cu's hot_loop that an H100 ran (nvcc -O3 -lineinfo, sm_90),
and its samples land on three of that function's pcs by weight. Launches start only
once the mock samples (the shim attached and set the context up), so every launch
is sampled; a warm-up kernel before that lets the shim see the context. (Without
GPU_AGENT_PC_SAMPLING=1 it does not wait, and says whether the mock sampled.)

  python py_pc_sampling.py ITERS KERNEL_NS PCS [SECONDS]   (PCS: "0x1d0:6,0x1c0:2,0xd0:1")
(With SECONDS, it repeats the ITERS iterations until that many seconds have passed, or
until the file PY_PC_SAMPLING_STOP names exists, where that is set.)
Prints what it launched as JSON.
"""

import ctypes
import json
import os
import sys
import time
from pathlib import Path

from py_sites import lib, site_a, site_b
from py_workload import check

CUBIN = Path(__file__).resolve().parent / "data" / "pcsampling" / "hot_loop_sm90.cubin"
HOT = b"_Z8hot_loopPfii"


def main():
    iters, kernel_ns, pcs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    launches = 1
    check(lib.cuInit(0), "cuInit")
    dev, ctx, mod = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    hot, warm = ctypes.c_void_p(), ctypes.c_void_p()
    check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    active = ctypes.CDLL("libcupti.so.13").mock_cupti_pc_sampling_active
    # The shim (injected at cuInit) reports module loads once it has attached.
    shim = ctypes.CDLL("libgpu_agent_shim.so", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    deadline = time.monotonic() + 60
    while shim.gpu_agent_shim_state() != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    image = f"cubin={CUBIN}\n{HOT.decode()}={kernel_ns}@{pcs}\nk_warm=1000\n".encode() + b"\0"
    check(lib.cuModuleLoadData(ctypes.byref(mod), image), "cuModuleLoadData")
    check(lib.cuModuleGetFunction(ctypes.byref(hot), mod, HOT), "cuModuleGetFunction")
    check(lib.cuModuleGetFunction(ctypes.byref(warm), mod, b"k_warm"), "cuModuleGetFunction")
    lib.cuLaunchKernel(warm, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    wanted = os.environ.get("GPU_AGENT_PC_SAMPLING") == "1"
    while wanted and not active() and time.monotonic() < deadline:
        # the shim notes a context at a launch in a collection window
        lib.cuLaunchKernel(warm, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        time.sleep(0.005)
    if wanted and not active():
        raise SystemExit("py_pc_sampling: PC sampling never started")
    # The agent sets up Python stacks when it first hears of the process (the shim's
    # attach); a long-running job gives it that moment (1 s was short once under load).
    if wanted:
        time.sleep(2.5)
    check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
    end = time.monotonic() + seconds
    stop = os.environ.get("PY_PC_SAMPLING_STOP", "")
    while True:  # ITERS iterations, or for SECONDS if given
        for _ in range(iters):
            site_a(hot)
            site_b(hot)
        check(lib.cuCtxSynchronize(), "cuCtxSynchronize")
        launches += 4 * iters
        if time.monotonic() >= end or (stop and os.path.exists(stop)):
            break
        time.sleep(0.01)
    print(json.dumps({"launches": launches, "pc_sampling_active": bool(active())}))


if __name__ == "__main__":
    main()
