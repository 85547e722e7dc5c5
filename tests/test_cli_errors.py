"""Bad environments give one clear line naming the fix, and a non-zero exit, through the real CLI.

Not-root is real (an unprivileged user namespace). The other cases hide one
prerequisite from the agent's preflight (bcc, kernel headers, uprobes) inside a
child interpreter, then run the real `gpu-agent run` entry point.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import agent_cmd, need_ebpf


def one_line_error(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpu-agent: error: ")
    return lines[0]


def run_cli_with(setup: str, *args: str):
    code = ("import sys\n" + setup + "\nfrom gpu_agent.cli import main\n"
            f"sys.exit(main({list(args)!r}))\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_not_root():
    proc = subprocess.run(["unshare", "--user", *agent_cmd("run", "--duration", "1")],
                          capture_output=True, text=True, timeout=60)
    assert "must run as root" in one_line_error(proc)


def test_record_not_root_does_not_run_the_command(tmp_path):
    marker = tmp_path / "ran"
    proc = subprocess.run(["unshare", "--user", *agent_cmd("record", "-o", tmp_path / "x.pb.gz", "--",
                                                           "touch", marker)],
                          capture_output=True, text=True, timeout=60)
    assert "must run as root" in one_line_error(proc)
    assert not marker.exists()


@pytest.mark.parametrize("setup, expect", [
    # bcc missing: block the module and its distribution fallback directory.
    ("sys.modules['bcc'] = None\nimport gpu_agent.preflight as p\np.DIST_PACKAGES = '/nonexistent'",
     "apt-get install python3-bpfcc"),
    # no kernel headers for the running kernel.
    ("import os\n_u = os.uname()\n"
     "class U: release = '0.0.0-no-such-kernel'; sysname = _u.sysname; machine = _u.machine\n"
     "os.uname = lambda: U\nos.environ.pop('BCC_KERNEL_SOURCE', None)",
     "apt-get install linux-headers-0.0.0-no-such-kernel"),
    # a kernel without uprobes.
    ("import gpu_agent.preflight as p\np.UPROBE_PMU = '/nonexistent/uprobe'", "no uprobe support"),
])
def test_missing_prerequisite(setup, expect):
    need_ebpf()
    assert expect in one_line_error(run_cli_with(setup, "run", "--duration", "1"))


def test_bad_interval_is_a_usage_error():
    proc = subprocess.run(agent_cmd("run", "--interval", "soon"), capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid duration 'soon'" in proc.stderr


def _full_tmpfs(path):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], check=True)
    subprocess.run(["dd", "if=/dev/zero", f"of={path / 'fill'}", "bs=4k", "count=64"],
                   capture_output=True)  # fails once the tmpfs is full: that is the point
    return path


@pytest.mark.parametrize("where", ["under-a-file", "a-directory", "full-disk"])
def test_record_unwritable_output_fails_before_the_command_runs(tmp_path, where):
    """An output that cannot be written is one line and exit 2, and the command never
    runs: before, the whole job ran and its profile was lost at the end."""
    need_ebpf()
    marker = tmp_path / "ran"
    (tmp_path / "file").write_text("x")
    out = {"under-a-file": tmp_path / "file" / "x.pb.gz", "a-directory": tmp_path,
           "full-disk": None}[where]
    mnt = None
    if out is None:
        mnt = _full_tmpfs(tmp_path / "mnt")
        out = mnt / "x.pb.gz"
    try:
        proc = subprocess.run(agent_cmd("record", "-o", out, "--", "touch", marker),
                              capture_output=True, text=True, timeout=60)
    finally:
        if mnt is not None:
            subprocess.run(["umount", str(mnt)], check=False)
    line = one_line_error(proc)
    assert str(out) in line and "nothing was run" in line, line
    assert not marker.exists()


def test_run_refuses_an_output_dir_it_cannot_write(tmp_path):
    need_ebpf()
    (tmp_path / "file").write_text("x")
    proc = subprocess.run(agent_cmd("run", "--output-dir", tmp_path / "file", "--duration", "1"),
                          capture_output=True, text=True, timeout=60)
    assert "--output-dir" in one_line_error(proc)


def test_run_keeps_going_when_its_store_fills_up(tmp_path):
    """A disk that fills while the agent runs drops windows (counted, said once) and
    the agent stays up; before, ENOSPC was a traceback and exit 1."""
    from conftest import MOCK_APP, SHIM, mock_env
    need_ebpf()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=True)
    try:
        agent = subprocess.Popen(agent_cmd("run", "--output-dir", mnt, "--interval", "1s",
                                           "--duration", "6"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err = []
        for line in agent.stderr:
            err.append(line)
            if "watching" in line:
                break
        subprocess.run(["dd", "if=/dev/zero", f"of={mnt / 'fill'}", "bs=4k", "count=64"],
                       capture_output=True)  # fills the tmpfs
        subprocess.run([str(MOCK_APP), "--duration", "2", "--sleep-ms", "5"], timeout=60,
                       env=mock_env(CUDA_INJECTION64_PATH=str(SHIM)), capture_output=True, check=True)
        out, rest = agent.communicate(timeout=60)
        err.append(rest)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    stderr = "".join(err)
    assert agent.returncode == 0, stderr
    assert stderr.count("cannot write profiles into") == 1, stderr
    assert "local=dropped:" in out, out


@pytest.mark.parametrize("extra, refused", [((), True), (("--allow-insecure-token",), False)])
def test_a_bearer_token_over_plaintext_to_another_host_is_refused(tmp_path, extra, refused):
    """grpc:// (no TLS) to a host other than this one would send the token readable on
    the network: one line, exit 2, unless asked for. (Loopback stays allowed.)"""
    need_ebpf()
    token = tmp_path / "token"
    token.write_text("s3cret")
    proc = subprocess.run(agent_cmd("run", "--remote-store", "grpc://192.0.2.1:7070",
                                    "--bearer-token-file", token, "--duration", "1", *extra),
                          capture_output=True, text=True, timeout=120)
    if refused:
        assert "--allow-insecure-token" in one_line_error(proc)
    else:
        assert proc.returncode == 0, proc.stderr


def test_root_without_sys_admin_is_one_line_before_the_command_runs(tmp_path):
    """Root with CAP_SYS_ADMIN dropped (a container's securityContext) cannot attach
    uprobes on Linux >= 6.16: `record` used to run the whole command, then write an
    empty profile and exit 0."""
    marker = tmp_path / "ran"
    proc = subprocess.run(["setpriv", "--bounding-set", "-sys_admin",
                           *agent_cmd("record", "-o", tmp_path / "x.pb.gz", "--", "touch", marker)],
                          capture_output=True, text=True, timeout=60)
    assert "CAP_SYS_ADMIN" in one_line_error(proc)
    assert not marker.exists()
