"""A Python process whose interpreter state points where no user address is: the
agent reads a Python process's thread list and frames through /proc/PID/mem before it
lets BPF walk them (symbols/python/layout.py), and every pointer there is the
process's to forge.

On an H200 (2026-12-03) `record` of a torch.compile job died of it: a frame pointer
read while the job ran was >= 2**63, and os.pread's offset (a C long) raised
OverflowError, not the OSError the readers handle. Here a uid-65534 Python sets its
own thread state's `next` to 0x8000000000000000 before it starts CUDA (the mock's),
launches for 12 s (the agent tries a process whose threads read wrong ten times, a
second apart: a frame may go between two reads), and leaves with os._exit (CPython
walks no thread list on the way). The agent must stay up, say why that pid's stacks
stay native-only, profile its kernels, and keep an honest job beside it exact."""

from __future__ import annotations

import subprocess
import textwrap

from support.env import mock_env

from . import attacker as A
from .faultkit import SHIM, settle

FORGER = textwrap.dedent("""
    import ctypes, os, sys, time
    api = ctypes.pythonapi
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    ts, interp = api.PyThreadState_Get(), api.PyInterpreterState_Get()
    word = lambda off: ctypes.c_uint64.from_address(ts + off)
    # struct _ts { prev; next; interp; ... } in CPython 3.11-3.13: interp at 16 says so
    assert word(16).value == interp, "not the thread state layout this test knows"
    assert word(8).value == 0, "another thread state follows"
    word(8).value = 0x8000000000000000  # + any offset: past 2**63, under 2**64
    cuda = ctypes.CDLL("libcuda.so.1")  # the mock's (tests/py_workload.py sets it up so)
    cuda.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
    dev, ctx, mod, kern = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuModuleLoadData(ctypes.byref(mod), b"k_forged_frames=1000\\n\\0") == 0
    assert cuda.cuModuleGetFunction(ctypes.byref(kern), mod, b"k_forged_frames") == 0
    print("forged", os.getpid(), flush=True)
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        assert cuda.cuLaunchKernel(kern, 1, 1, 1, 1, 1, 1, 0, None, None, None) == 0
        time.sleep(0.002)
    assert cuda.cuCtxSynchronize() == 0
    sys.stdout.flush()
    os._exit(0)
""")


def test_a_thread_list_pointing_past_user_memory_leaves_the_agent_up(node, honest, world_dir):
    good = honest("--paths", "cuLaunchKernel", "--duration", "12", "--sleep-ms", "2")
    env = mock_env(CUDA_INJECTION64_PATH=str(SHIM), GPU_AGENT_SAMPLE_PERIOD="1")
    forger = subprocess.run(
        ["/usr/bin/python3", "-c", FORGER, "12"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=world_dir,
        preexec_fn=A.as_nobody,
    )
    assert forger.returncode == 0, forger.stderr
    pid = forger.stdout.split()[1]
    good.wait()
    settle(node)
    node.assert_up()
    # the samples once the agent stopped (every held interval written): read 2.5 s after
    # the honest job's exit, a three-worker suite found 4 623 of its 5 555 launches
    node.stop()
    samples = node.samples()
    err = node.agent.err
    # the forged pointer is refused as an address, and that process is profiled without Python frames
    said = [ln for ln in err.splitlines() if f"pid {pid}:" in ln and "stacks stay native-only" in ln]
    assert len(said) == 1 and "a thread or frame pointer reads nowhere (bad address 0x8" in said[0], err[-3000:]
    assert any(s.labels.get("pid") == pid for s in samples), "the forger's kernels are not in the profiles"
    good.assert_exact(samples)
