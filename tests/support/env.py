"""The tests' plain helpers (no fixtures): where the built parts are, the mock
CUDA environment, the real agent CLI. Every test module imports them from here."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
MOCK_DIR = BUILD / "mock"
MOCK_APP = MOCK_DIR / "mock_workload"
SHIM = BUILD / "libgpu_agent_shim.so"
# The benchmark build (make shim-bench): audit mode and the GPU_AGENT_EXP_* knobs,
# which the shim users inject does not carry.
BENCH_SHIM = BUILD / "shim-bench" / "libgpu_agent_shim.so"


def private_shim(directory: Path, shim: Path | None = None) -> Path:
    """A copy of the shim that no other agent on the host attaches to: discover()
    looks for libgpu_agent_shim.so in processes' maps, and this name differs. (The
    suite runs beside a system agent, whose uprobes would be in the shared copy.)"""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "libgpu_agent_shim_private.so"
    shutil.copy(shim or SHIM, path)
    return path


def need_ebpf() -> None:
    """Tests that load BPF fail loudly (never skip) when they cannot: CI runs them as root."""
    if os.geteuid() != 0:
        pytest.fail("this test loads real eBPF and must run as root (make test as root)")


def agent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpu_agent", *map(str, args)]


def mock_env(ground_truth: Path | None = None, **extra: str) -> dict:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(MOCK_DIR) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env.pop("CUDA_INJECTION64_PATH", None)
    for k in [k for k in env if k.startswith("GPU_AGENT_") or k.startswith("MOCK_CUDA_")]:
        del env[k]
    # Continuous collection: most tests compare with the mock's exact ground
    # truth. The collection-window tests (test_windows.py) pass their own.
    env["GPU_AGENT_DUTY_CYCLE"] = "1"
    if ground_truth is not None:
        env["MOCK_CUDA_GROUND_TRUTH"] = str(ground_truth)
    env.update(extra)
    return env


def ground_truth(path: Path) -> dict[str, tuple[int, int]]:
    """The mock driver's exact per-kernel totals: mangled name -> (launches, gpu_ns).

    Profiles are compared by the kernel frame's system (mangled) name, which
    `pprof -raw` prints, so the check does not depend on any demangler."""
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in path.read_text().splitlines()[1:]:
        if line.strip():
            mangled, launches, ns = line.split("\t")
            acc[mangled][0] += int(launches)
            acc[mangled][1] += int(ns)
    return {k: (v[0], v[1]) for k, v in acc.items()}


def shim_without_cbid(path: Path, cbid: int = 307, bench: bool = False) -> Path:
    """A shim built at `path` without one launch callback (default 307, the
    driver's cuLaunchKernel): GA_OMIT_CBID, a build-time guard for the tests.
    bench: the benchmark build (audit mode, GPU_AGENT_EXP_*)."""
    var = "SHIM_BENCH" if bench else "SHIM"
    subprocess.run(
        ["make", "-s", "-C", str(REPO), f"{var}={path}", f"SHIM_DEFS=-DGA_OMIT_CBID={cbid}", str(path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return path


def list_paths() -> list[str]:
    out = subprocess.run([str(MOCK_APP), "--list-paths"], env=mock_env(), capture_output=True, text=True, check=True)
    return out.stdout.split()
