"""`gpu-agent run` finds copies of the shim at other paths (other inodes), as a
container that bakes its own copy into its image has, and attaches to them.

Discovery is node-wide: copies and processes of tests running beside these ones
may show up too, so the checks are about this test's own copy and process."""

from __future__ import annotations

import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.env import MOCK_APP, SHIM, mock_env, need_ebpf
from support.agent import Agent


def _mine(samples, pid: int, kernel_prefix: str) -> list:
    return [s for s in samples if s.labels.get("pid") == str(pid) and s.frames[0].startswith(kernel_prefix)]


def _stop(a: Agent) -> tuple[str, str]:
    a.proc.send_signal(signal.SIGTERM)
    out, err = a.proc.communicate(timeout=60)
    assert a.proc.returncode == 0, err
    return out, err


@pytest.fixture
def agent(tmp_path, built):
    need_ebpf()
    a = Agent(tmp_path / "profiles", "--discover-interval", "300ms")
    yield a
    if a.proc.poll() is None:
        a.proc.kill()
        a.proc.wait()


def test_copy_of_the_shim_at_another_path(agent, tmp_path):
    copy = tmp_path / "image" / "usr" / "lib" / SHIM.name
    copy.parent.mkdir(parents=True)
    shutil.copy(SHIM, copy)  # another inode: the agent's uprobes on SHIM do not cover it
    app = subprocess.Popen(
        [str(MOCK_APP), "--paths", "cuLaunchKernel", "--duration", "3", "--sleep-ms", "2"],
        env=mock_env(CUDA_INJECTION64_PATH=str(copy)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert app.wait(timeout=60) == 0, app.stderr.read()
    time.sleep(1.5)
    out, err = _stop(agent)
    assert f"also watching {copy} (pid {app.pid}" in err, err
    assert max(int(n) for n in re.findall(r" shims=(\d+)", out)) >= 2, out
    mine = _mine(agent.samples(), app.pid, "k_cuLaunchKernel(")
    assert mine, "no kernels from the process that loaded the copy"
    assert any("launch_cuLaunchKernel" in s.frames for s in mine if "[unsampled]" not in s.frames)


def test_copy_visible_only_in_another_mount_namespace(agent, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) not installed")
    hidden = tmp_path / "ns"
    hidden.mkdir()
    copy = hidden / SHIM.name
    # A private tmpfs over `hidden`, seen only inside the new mount namespace.
    script = (
        f"mount -t tmpfs none {shlex.quote(str(hidden))} && "
        f"cp {shlex.quote(str(SHIM))} {shlex.quote(str(copy))} && "
        f"exec {shlex.quote(str(MOCK_APP))} --paths cudaLaunchKernel --duration 3 --sleep-ms 2"
    )
    app = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        env=mock_env(CUDA_INJECTION64_PATH=str(copy)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert app.wait(timeout=60) == 0, app.stderr.read()
    assert not copy.exists()  # never visible from here
    time.sleep(1.5)
    out, err = _stop(agent)
    # unshare -m forks nothing and sh execs the workload: one pid all along
    assert f"also watching {copy} (pid {app.pid}, through /proc/{app.pid}/root{copy})" in err, err
    assert _mine(agent.samples(), app.pid, "k_cudaLaunchKernel("), (
        "no kernels from the process whose copy is only in its mount namespace"
    )


def test_session_discover_dedups_and_rejects_other_builds(tmp_path, built):
    """BpfSession.discover(): a copy is attached once; the agent's own shim reached
    through a symlink is not attached again (its probes would fire twice); a
    library with the probes at other places (another build) is refused."""
    need_ebpf()
    from gpu_agent.probes.bpf_session import BpfSession

    sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
    import firer_script as F

    copy = tmp_path / "copy" / SHIM.name
    copy.parent.mkdir()
    shutil.copy(SHIM, copy)
    link = tmp_path / "link.so"
    link.symlink_to(SHIM)
    other_lib, _ = F.build(tmp_path / "firer")
    other = tmp_path / "other" / SHIM.name
    other.parent.mkdir()
    shutil.copy(other_lib, other)
    procs = [subprocess.Popen(["sleep", "60"], env=mock_env(LD_PRELOAD=str(lib))) for lib in (copy, link, other)]
    try:
        deadline = time.monotonic() + 5
        for p in procs:  # until the loader has mapped each library
            while "libgpu_agent_shim" not in Path(f"/proc/{p.pid}/maps").read_text():
                assert time.monotonic() < deadline
                time.sleep(0.02)
        s = BpfSession(str(SHIM))
        s.open()
        try:
            n = len(s.attachments.uprobes)
            found = {f.path: f for f in s.discover()}
            assert str(copy) in found and found[str(copy)].pid == procs[0].pid
            assert str(SHIM) not in found and str(link) not in found
            assert str(other) not in found and "another build" in s.discover_errors[str(other)]
            assert len(s.attachments.uprobes) - n >= 4 * len(found)  # 3 data probes (1+ site) + attach each
            # attached_files() counts shim files; found may also hold a parcagpu library
            # that another test (another pytest worker) maps at the time.
            assert s.attached_files() == 1 + len([f for f in found.values() if f.source == "shim"])
            assert str(copy) not in {f.path for f in s.discover()}  # attached once
        finally:
            s.close()
        assert s.attached_files() == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()
