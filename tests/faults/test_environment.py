"""A faulty environment, not an attacker (issue 16, item 9): a full or read-only
output, an output that is not a directory, root without CAP_SYS_ADMIN. Each is one
line and exit 2 before anything runs, or, once the agent runs, a dropped window
that is counted and said once while the agent keeps going."""

from __future__ import annotations

import subprocess

import pytest

from gpu_agent.profile.store import PROFILE_GLOB
from support.cli import one_line_error
from support.env import MOCK_APP, SHIM, agent_cmd, mock_env, need_ebpf


def _full_tmpfs(path):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], check=True)
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={path / 'fill'}", "bs=4k", "count=64"], capture_output=True
    )  # fails once the tmpfs is full: that is the point
    return path


@pytest.mark.parametrize("where", ["under-a-file", "a-directory", "full-disk"])
def test_record_unwritable_output_fails_before_the_command_runs(tmp_path, where):
    """An output that cannot be written is one line and exit 2, and the command never
    runs: before, the whole job ran and its profile was lost at the end."""
    need_ebpf()
    marker = tmp_path / "ran"
    (tmp_path / "file").write_text("x")
    out = {"under-a-file": tmp_path / "file" / "x.pb.gz", "a-directory": tmp_path, "full-disk": None}[where]
    mnt = None
    if out is None:
        mnt = _full_tmpfs(tmp_path / "mnt")
        out = mnt / "x.pb.gz"
    try:
        proc = subprocess.run(
            agent_cmd("record", "-o", out, "--", "touch", marker), capture_output=True, text=True, timeout=60
        )
    finally:
        if mnt is not None:
            subprocess.run(["umount", str(mnt)], check=False)
    line = one_line_error(proc)
    assert str(out) in line and "nothing was run" in line, line
    assert not marker.exists()


def test_run_refuses_an_output_dir_it_cannot_write(tmp_path):
    need_ebpf()
    (tmp_path / "file").write_text("x")
    proc = subprocess.run(
        agent_cmd("run", "--output-dir", tmp_path / "file", "--duration", "1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--output-dir" in one_line_error(proc)


def test_run_keeps_going_when_its_store_fills_up(tmp_path):
    """A disk that fills while the agent runs drops windows (counted, said once) and
    the agent stays up; before, ENOSPC was a traceback and exit 1."""
    need_ebpf()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        agent = subprocess.Popen(
            agent_cmd("run", "--output-dir", mnt, "--interval", "1s", "--duration", "6"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        err = []
        for line in agent.stderr:
            err.append(line)
            if "watching every process" in line:  # not "also watching" a copy
                break
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={mnt / 'fill'}", "bs=4k", "count=64"], capture_output=True
        )  # fills the tmpfs
        subprocess.run(
            [str(MOCK_APP), "--duration", "2", "--sleep-ms", "5"],
            timeout=60,
            env=mock_env(CUDA_INJECTION64_PATH=str(SHIM)),
            capture_output=True,
            check=True,
        )
        out, rest = agent.communicate(timeout=60)
        err.append(rest)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    stderr = "".join(err)
    assert agent.returncode == 0, stderr
    assert stderr.count("cannot write profiles into") == 1, stderr
    assert "local=dropped:" in out, out


def test_root_without_sys_admin_is_one_line_before_the_command_runs(tmp_path):
    """Root with CAP_SYS_ADMIN dropped (a container's securityContext) cannot attach
    uprobes on Linux >= 6.16: `record` used to run the whole command, then write an
    empty profile and exit 0."""
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [
            "setpriv",
            "--bounding-set",
            "-sys_admin",
            *agent_cmd("record", "-o", tmp_path / "x.pb.gz", "--", "touch", marker),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "CAP_SYS_ADMIN" in one_line_error(proc)
    assert not marker.exists()


def test_the_local_store_keeps_its_newest_windows_within_max_store_bytes(tmp_path, built):
    """A node agent writing a window every interval filled its disk in the end: the
    store is bounded, oldest windows first, and other files in it are never touched."""
    from support.agent import Agent

    need_ebpf()
    store = tmp_path / "store"
    store.mkdir()
    (store / "notes.txt").write_text("not a profile")
    agent = Agent(store, "--max-store-bytes", "2k")
    try:
        subprocess.run(
            [str(MOCK_APP), "--paths", "cuLaunchKernel,cudaLaunchKernel", "--duration", "7", "--sleep-ms", "2"],
            env=mock_env(CUDA_INJECTION64_PATH=str(SHIM)),
            capture_output=True,
            check=True,
            timeout=120,
        )
    finally:
        out = agent.stop()
    written = [line.rsplit("-> ", 1)[1] for line in out.splitlines() if "-> " in line]
    kept = sorted(p.name for p in store.glob(PROFILE_GLOB))
    total = sum(p.stat().st_size for p in store.glob(PROFILE_GLOB))
    assert len(written) >= 5, out
    assert kept and kept == sorted(p.rsplit("/", 1)[1] for p in written)[-len(kept) :], (kept, written)
    assert len(kept) < len(written) and (total <= 2 * 1024 or len(kept) == 1), (total, kept)
    assert f"rotated:{len(written) - len(kept)}" in out.splitlines()[-1], out
    assert (store / "notes.txt").read_text() == "not a profile"


@pytest.mark.parametrize("bad", ["missing-shim", "shim-not-elf", "missing-token"])
def test_bad_inputs_are_one_line_and_nothing_runs(tmp_path, bad):
    """A bad --shim or a missing --bearer-token-file was a traceback; `record` must
    also not run the command."""
    need_ebpf()
    (tmp_path / "not-elf.so").write_text("text")
    extra = {
        "missing-shim": ["--shim", tmp_path / "none.so"],
        "shim-not-elf": ["--shim", tmp_path / "not-elf.so"],
        "missing-token": ["--remote-store", "grpc://127.0.0.1:7070", "--bearer-token-file", tmp_path / "no-token"],
    }[bad]
    line = one_line_error(
        subprocess.run(agent_cmd("run", *extra, "--duration", "1"), capture_output=True, text=True, timeout=120)
    )
    assert str(extra[-1]) in line, line
    if bad != "missing-token":  # record has no backends
        marker = tmp_path / "ran"
        line = one_line_error(
            subprocess.run(
                agent_cmd("record", *extra, "-o", tmp_path / "x.pb.gz", "--", "touch", marker),
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
        assert str(extra[-1]) in line and not marker.exists(), line
