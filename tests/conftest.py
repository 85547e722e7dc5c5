"""Shared fixtures: the built parts, the mock CUDA environment, and the real agent CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.env import (BENCH_SHIM, BUILD, MOCK_APP, MOCK_DIR, REPO, SHIM, agent_cmd,  # noqa: E402,F401
                         ground_truth, list_paths, mock_env, need_ebpf, shim_without_cbid)


@pytest.fixture(scope="session")
def built():
    missing = [p for p in (SHIM, MOCK_APP, MOCK_DIR / "libcuda.so.1", MOCK_DIR / "libcupti.so.13") if not p.exists()]
    if missing:
        pytest.fail(f"not built: {', '.join(map(str, missing))}; run `make`")
    return True


@pytest.fixture(scope="session")
def firer(tmp_path_factory):
    """(probe library, firer executable) of tests/probe_firer, built once."""
    need_ebpf()
    sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
    import firer_script
    return firer_script.build(tmp_path_factory.mktemp("firer"))


def fire_into(collector, exe: Path, script: Path, kernels: int, timeout: float = 5.0) -> None:
    """Runs the firer's script and waits until BPF has aggregated `kernels` records.
    Nothing polls the ring buffer meanwhile: what the collector makes of queued
    events is part of what the callers test."""
    import time
    p = subprocess.run([str(exe), str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and collector.session.counters()["kernels"] < kernels:
        time.sleep(0.05)

