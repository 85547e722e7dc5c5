"""deploy/build-shim.sh: the shim built against CUDA 12 headers works end to end.

CI installs NVIDIA's CUDA 12.9 header wheels into /opt/gpu-agent-cuda12
(deploy/install-deps.sh; the Dockerfile's shim stage uses the same ones). The
CUDA 12 build reads CUpti_ActivityKernel9 records where the default CUDA 13 build
reads Kernel10: this proves that build keeps the probe contract and still gives
exact per-kernel times through real eBPF on the mock CUDA stack (whose libcupti
writes Kernel10 records, which start with the Kernel9 layout).
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from support.env import MOCK_APP, REPO, agent_cmd, ground_truth, mock_env, need_ebpf
from support.pprof_tool import raw
from support.probes import check_shim_notes

CUDA12 = Path("/opt/gpu-agent-cuda12/include")
SCRIPT = REPO / "deploy" / "build-shim.sh"


@pytest.fixture(scope="module")
def shim12(tmp_path_factory):
    if not (CUDA12 / "cupti.h").exists():
        pytest.fail(f"CUDA 12 headers missing in {CUDA12}: run `make deps` (deploy/install-deps.sh)")
    out = tmp_path_factory.mktemp("cuda12")
    p = subprocess.run(
        [str(SCRIPT), "--cuda", str(CUDA12.parent), "--out", str(out)], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr
    assert "built against CUDA 12." in p.stdout, p.stdout
    return out / "libgpu_agent_shim.so"


def test_cuda12_build_keeps_the_probe_contract(shim12):
    check_shim_notes(shim12)


def test_cuda12_build_profiles_every_kernel_exactly(shim12, tmp_path, built):
    need_ebpf()
    gt = tmp_path / "truth.tsv"
    out = tmp_path / "c12.pb.gz"
    p = subprocess.run(
        agent_cmd("record", "--shim", shim12, "-o", out, "--", MOCK_APP, "--paths", "all", "--iters", "50"),
        env=mock_env(gt),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr
    got = defaultdict(lambda: [0, 0])
    for s in raw(out):
        got[s.system_names[0]][0] += s.values[1]
        got[s.system_names[0]][1] += s.values[0]
    assert {k: tuple(v) for k, v in got.items()} == ground_truth(gt)


def test_no_cuda_headers_is_one_clear_line(tmp_path):
    p = subprocess.run([str(SCRIPT), "--cuda", str(tmp_path / "none")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and "no CUDA headers with CUPTI found" in p.stderr
