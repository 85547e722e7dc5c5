"""The README's first lines, as a newcomer without a GPU runs them."""

from __future__ import annotations

import subprocess

from support.env import REPO, need_ebpf


def test_make_demo_profiles_the_mock_without_a_gpu(tmp_path):
    """`make demo`: the real shim, agent and eBPF on the mock CUDA stack, read by Go's
    pprof: GPU time by kernel, under the Python functions that launched it."""
    need_ebpf()
    p = subprocess.run(["make", "-s", "demo"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Type: gpu_time" in p.stdout
    top = {line.split()[-1] for line in p.stdout.splitlines() if "%" in line and line.split()}
    assert {"k_py_held", "k_py_free", "Model.forward"} <= top, p.stdout[-2000:]
    assert (REPO / "demo.pb.gz").stat().st_size > 0
    # the timeline, read back as trace_processor resolves it: the demo's kernels are on it
    from support.perfetto_read import read_perfetto

    _, _, slices, _, _ = read_perfetto(REPO / "demo.perfetto-trace")
    assert {"k_py_held", "k_py_free"} <= {s["name"] for s in slices}, sorted({s["name"] for s in slices})[:20]
