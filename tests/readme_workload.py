"""The README's stand-in workloads, on the mock CUDA stack: tests/test_readme.py copies
this file into its work directory as train.py (launches 3000 kernels and exits) and
serve.py (launches kernels until it is killed, at most 120 s), so that the README's
usage lines run as printed. Standard library only."""

import ctypes
import sys
import time
from pathlib import Path


def main() -> None:
    serve = Path(sys.argv[0]).name == "serve.py"
    kernel = b"k_serve" if serve else b"k_train"
    cuda = ctypes.CDLL("libcuda.so.1")
    for name in (
        "cuInit",
        "cuDeviceGet",
        "cuCtxCreate_v2",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuCtxSynchronize",
        "cuLaunchKernel",
    ):
        getattr(cuda, name).restype = ctypes.c_int
    cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    steps = [
        cuda.cuInit(0),
        cuda.cuDeviceGet(ctypes.byref(dev), 0),
        cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev),
        cuda.cuModuleLoadData(ctypes.byref(mod), kernel + b"=2000\n\0"),
        cuda.cuModuleGetFunction(ctypes.byref(fn), mod, kernel),
    ]
    if any(steps):
        raise SystemExit(f"{sys.argv[0]}: the mock CUDA stack failed: {steps}")
    deadline = time.monotonic() + 120
    launched = 0
    while (serve and time.monotonic() < deadline) or launched < 3000:
        cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, None, None)
        launched += 1
        if launched % 100 == 0:
            cuda.cuCtxSynchronize()
            time.sleep(0.01 if serve else 0.001)
    cuda.cuCtxSynchronize()


if __name__ == "__main__":
    main()
