"""`gpu-agent trace` (root) against a local user (uid 65534):
- the node's capture lock is a 0600 file in a 0700 directory of root's: locks that
  nobody takes first (in /tmp, where the lock used to fall back to, or read-only on
  the 0644 lock of earlier versions) refuse nothing;
- a FIFO that nobody swaps in at the path of the shim their process maps does not
  hang the capture (it used to block in open() while holding the node's lock): the
  process is refused in one line, and the lock is free again."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time

from support.env import MOCK_APP, SHIM, agent_cmd, mock_env, need_ebpf

from .attacker import as_nobody

NOBODY = 65534


def _workload(shim, *, nobody: bool, seconds: int = 40) -> subprocess.Popen:
    env = mock_env(CUDA_INJECTION64_PATH=str(shim), GPU_AGENT_DUTY_CYCLE="10")
    return subprocess.Popen(
        [MOCK_APP, "--bench", str(2000 * seconds), "--rate", "2000"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=as_nobody if nobody else None,
    )


def test_locks_a_local_user_holds_refuse_no_capture(world_dir, built, tmp_path):
    """nobody holds every capture lock it can open: /tmp's (the old fallback) and,
    read-only, the 0644 /run/gpu-agent/trace.lock that earlier versions left in a
    0755 directory (made so here)."""
    need_ebpf()
    os.makedirs("/run/gpu-agent", exist_ok=True)
    os.chmod("/run/gpu-agent", 0o755)
    old = "/run/gpu-agent/trace.lock"
    with open(old, "a"):
        pass
    os.chmod(old, 0o644)
    holder = subprocess.Popen(
        [
            "/usr/bin/python3",
            "-c",
            "import fcntl, os, sys, time\n"
            "held = []\n"
            "for p, m in (('/tmp/gpu-agent-trace.lock', 'a+'), ('/run/gpu-agent/trace.lock', 'r'),\n"
            "             ('/run/gpu-agent/capture.lock', 'r')):\n"
            "    try:\n"
            "        f = open(p, m); fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); held.append(f)\n"
            "    except OSError:\n"
            "        pass\n"
            "print('holding', len(held), flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=as_nobody,
    )
    work = _workload(SHIM, nobody=False)
    try:
        assert holder.stdout.readline().strip() in ("holding 1", "holding 2")
        p = subprocess.run(
            agent_cmd("trace", "--pid", work.pid, "--duration", "1s", "--events", tmp_path / "cap.ndjson"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0 and "another capture" not in p.stderr, p.stderr
        st_dir, st_lock = os.lstat("/run/gpu-agent"), os.lstat("/run/gpu-agent/capture.lock")
        assert st_dir.st_uid == 0 and stat.S_IMODE(st_dir.st_mode) == 0o700, oct(st_dir.st_mode)
        assert st_lock.st_uid == 0 and stat.S_IMODE(st_lock.st_mode) == 0o600, oct(st_lock.st_mode)
    finally:
        for q in (holder, work):
            q.kill()
            q.wait()


def test_a_fifo_at_the_shim_path_does_not_hang_trace(world_dir, built, tmp_path):
    need_ebpf()
    d = world_dir / "fifo-shim"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    shim = d / "libgpu_agent_shim.so"
    shutil.copy(SHIM, shim)
    os.chown(shim, NOBODY, NOBODY)
    work = _workload(shim, nobody=True)
    try:
        time.sleep(1.0)  # the shim is mapped
        # nobody swaps the mapped file for a FIFO, as themselves
        subprocess.run(["sh", "-c", f"rm {shim} && mkfifo {shim}"], check=True, preexec_fn=as_nobody)
        assert stat.S_ISFIFO(os.lstat(shim).st_mode)
        t0 = time.monotonic()
        p = subprocess.run(
            agent_cmd("trace", "--pid", work.pid, "--duration", "1s", "--events", tmp_path / "cap.ndjson"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 2 and f"cannot trace {work.pid}" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and time.monotonic() - t0 < 30, p.stderr
        # the node's lock is free again: the next capture is not refused for it
        again = subprocess.run(
            agent_cmd("trace", "--pid", work.pid, "--duration", "1s", "--events", tmp_path / "cap2.ndjson"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "another capture" not in again.stderr, again.stderr
    finally:
        work.kill()
        work.wait()


EXEC_LATER = """
import ctypes, os, sys
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0  # the mock driver loads the shim (CUDA_INJECTION64_PATH)
print("ready", flush=True)
sys.stdin.readline()
os.execv("/bin/sleep", ["sleep", "30"])
"""


def test_a_target_that_execs_after_the_check_gets_no_write(built, tmp_path):
    """Issue 30: nobody exec'd a setuid program while a capture started, and the root
    agent wrote 8 bytes into it. Writes now go through the /proc/PID/mem descriptor
    opened before the checks: after an exec it refers to an image that is gone."""
    from gpu_agent.timeline.target import TraceTarget

    env = mock_env(CUDA_INJECTION64_PATH=str(SHIM))
    p = subprocess.Popen(
        ["/usr/bin/python3", "-c", EXEC_LATER],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_nobody,
    )
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        t = TraceTarget.open(p.pid)
        assert not isinstance(t, str), t
        try:
            assert t.write(0)  # the checked image takes it
            p.stdin.write("go\n")
            p.stdin.flush()
            end = time.monotonic() + 10
            while os.readlink(f"/proc/{p.pid}/exe") != "/usr/bin/sleep" and time.monotonic() < end:
                time.sleep(0.02)
            assert os.readlink(f"/proc/{p.pid}/exe") == "/usr/bin/sleep"
            assert not t.write(123)  # the image it was bound to is gone: nothing written
        finally:
            t.close()
        assert TraceTarget.open(p.pid) == "it maps no gpu-agent shim"  # sleep's image
    finally:
        p.kill()
        p.wait()


def test_a_setuid_target_is_refused(world_dir, built):
    from gpu_agent.timeline.target import TraceTarget

    sleeper = world_dir / "suid-sleep"
    shutil.copy("/bin/sleep", sleeper)
    os.chown(sleeper, 0, 0)
    os.chmod(sleeper, 0o4755)
    p = subprocess.Popen([str(sleeper), "30"], preexec_fn=as_nobody)
    try:
        time.sleep(0.3)
        assert TraceTarget.open(p.pid) == "it runs in secure mode (setuid, setgid or file capabilities)"
    finally:
        p.kill()
        p.wait()
