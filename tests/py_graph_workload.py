"""CUDA graph capture from Python (ctypes on the mock libcuda), for tests/test_graphs.py.

Two distinctly named Python methods capture one kernel each into one graph;
the graph is instantiated and replayed from a third function:

  python py_graph_workload.py [--replays N]

Standard library only. Kernels: k_py_attention (Block.attention), k_py_mlp
(Block.mlp); replayed from replay_loop().
"""

import ctypes
import sys
import time

KERNELS = ["k_py_attention", "k_py_mlp"]


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"py_graph_workload: {what} failed: {rc}")


class Block:
    def __init__(self, cu, kerns, stream):
        self.cu, self.kerns, self.stream = cu, kerns, stream

    def _launch(self, name):
        check(self.cu.cuLaunchKernel(self.kerns[name], 1, 1, 1, 1, 1, 1, 0, self.stream, None, None), name)

    def attention(self):
        self._launch("k_py_attention")

    def mlp(self):
        self._launch("k_py_mlp")

    def capture(self):
        graph = ctypes.c_void_p()
        check(self.cu.cuStreamBeginCapture_v2(self.stream, 0), "cuStreamBeginCapture")
        self.attention()
        self.mlp()
        check(self.cu.cuStreamEndCapture(self.stream, ctypes.byref(graph)), "cuStreamEndCapture")
        return graph


def replay_loop(cu, exe, stream, n):
    for _ in range(n):
        check(cu.cuGraphLaunch(exe, stream), "cuGraphLaunch")
    check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize")


def main():
    replays = 100
    if sys.argv[1:2] == ["--replays"]:
        replays = int(sys.argv[2])
    cu = ctypes.CDLL("libcuda.so.1")
    for name in (
        "cuInit",
        "cuDeviceGet",
        "cuCtxCreate_v2",
        "cuModuleLoadData",
        "cuModuleGetFunction",
        "cuStreamCreate",
        "cuStreamBeginCapture_v2",
        "cuStreamEndCapture",
        "cuGraphInstantiateWithFlags",
        "cuGraphLaunch",
        "cuStreamSynchronize",
        "cuLaunchKernel",
        "cuGraphExecDestroy",
        "cuGraphDestroy",
    ):
        getattr(cu, name).restype = ctypes.c_int
    cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    cu.cuStreamBeginCapture_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
    cu.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    cu.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
    cu.cuGraphInstantiateWithFlags.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong]
    cu.cuGraphExecDestroy.argtypes = [ctypes.c_void_p]
    cu.cuGraphDestroy.argtypes = [ctypes.c_void_p]
    check(cu.cuInit(0), "cuInit")
    dev, ctx, mod, stream = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    image = "".join(f"{k}={7000 + 1000 * i}\n" for i, k in enumerate(KERNELS)).encode() + b"\0"
    check(cu.cuModuleLoadData(ctypes.byref(mod), image), "cuModuleLoadData")
    kerns = {}
    for k in KERNELS:
        f = ctypes.c_void_p()
        check(cu.cuModuleGetFunction(ctypes.byref(f), mod, k.encode()), k)
        kerns[k] = f
    check(cu.cuStreamCreate(ctypes.byref(stream), 1), "cuStreamCreate")
    time.sleep(0.5)  # like loading a model: the agent sets the process's Python up meanwhile

    block = Block(cu, kerns, stream)
    graph = block.capture()
    exe = ctypes.c_void_p()
    check(cu.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, 0), "cuGraphInstantiate")
    replay_loop(cu, exe, stream, replays)
    check(cu.cuGraphExecDestroy(exe), "cuGraphExecDestroy")
    check(cu.cuGraphDestroy(graph), "cuGraphDestroy")
    # Like a real server, live on a little: the agent reads code objects from this
    # process's memory when it sees a new stack (a process gone by then has none).
    time.sleep(0.5)


if __name__ == "__main__":
    main()
