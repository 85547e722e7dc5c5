"""Where torch.compile's kernels reach the driver: ATen's lazy NVRTC table
(at::cuda::detail::lazyNVRTC, a struct of driver function pointers that each
replace their lazy stub at first use) or elsewhere. Prints the table's symbol,
size and the words that hold a libcuda launch function before and after a
compiled function runs. A fact-finding probe for the launch counter's coverage
(shim/src/launch_hook.cpp)."""

import ctypes
import ctypes.util
import os

import torch
import torch._inductor.config as ic

SYM = b"_ZN2at4cuda6detail9lazyNVRTCE"
NAMES = ["cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuModuleGetFunction"]


class DlInfo(ctypes.Structure):
    _fields_ = [
        ("fname", ctypes.c_char_p),
        ("fbase", ctypes.c_void_p),
        ("sname", ctypes.c_char_p),
        ("saddr", ctypes.c_void_p),
    ]


class Elf64Sym(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_uint32),
        ("info", ctypes.c_ubyte),
        ("other", ctypes.c_ubyte),
        ("shndx", ctypes.c_uint16),
        ("value", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
    ]


libdl = ctypes.CDLL(None)
lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
h = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
real = {n: ctypes.cast(getattr(cuda, n), ctypes.c_void_p).value for n in NAMES}
try:
    addr = ctypes.cast(getattr(h, SYM.decode()), ctypes.c_void_p).value
except AttributeError:
    addr = None
print("lazyNVRTC", hex(addr) if addr else None)
size = 0
if addr:
    info, sym = DlInfo(), ctypes.POINTER(Elf64Sym)()
    libdl.dladdr1.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(DlInfo),
        ctypes.POINTER(ctypes.POINTER(Elf64Sym)),
        ctypes.c_int,
    ]
    ok = libdl.dladdr1(ctypes.c_void_p(addr), ctypes.byref(info), ctypes.byref(sym), 1)  # RTLD_DL_SYMENT
    size = sym.contents.size if ok and sym else 0
    print("size", size, "in", info.fname)


def words(tag):
    if not addr:
        return
    n = size // 8
    ws = (ctypes.c_uint64 * n).from_address(addr)
    hits = {nm: [i for i in range(n) if ws[i] == v] for nm, v in real.items()}
    print(tag, "words", n, {k: v for k, v in hits.items() if v})


words("before")


@torch.compile
def f(x):
    return torch.nn.functional.gelu(x * 2 + 1).sum(-1)


x = torch.randn(256, 256, device="cuda")
for _ in range(3):
    f(x)
torch.cuda.synchronize()
words("after compile")
print("use_static_cuda_launcher", getattr(ic, "use_static_cuda_launcher", None))
