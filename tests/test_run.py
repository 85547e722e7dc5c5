"""`gpu-agent run` as a daemon: late starters, several processes, processes and the agent dying."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.env import MOCK_APP, SHIM, agent_cmd, mock_env, need_ebpf
from support.agent import Agent
from support.env import private_shim


def workload(*args: str, shim: Path = SHIM, **env) -> subprocess.Popen:
    # Workloads load the shim the way users do: CUDA_INJECTION64_PATH=$(gpu-agent shim-path).
    return subprocess.Popen(
        [str(MOCK_APP), *args],
        env=mock_env(**{"CUDA_INJECTION64_PATH": str(shim), **env}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def pids_with(samples, kernel_prefix: str) -> set[str]:
    return {s.labels["pid"] for s in samples if s.frames[0].startswith(kernel_prefix)}


@pytest.fixture
def agent(tmp_path, built):
    """An agent of the test's own shim copy (workload(..., shim=agent.shim)): another
    agent's processes on the host (the other worker's, in a two-worker run) are not
    its own ("2 attached process(es) show no kernel" where the test made one); nor does
    it discover them (they map the shared shim, which discovery attaches: the same
    line again in a two-worker run)."""
    need_ebpf()
    shim = private_shim(tmp_path / "shim")
    a = Agent(tmp_path / "profiles", "--shim", shim, "--discover-interval", "0")
    a.shim = shim
    yield a
    a.kill()


def test_running_late_concurrent_and_killed_processes(agent):
    # The wait for the probes is said before it, at once (issue 45: `run &` printed
    # nothing for 6 s, and a job started meanwhile was missed), then `watching`.
    assert agent.start_lines[0].startswith("gpu-agent: loading the eBPF probes (a few seconds), then watching")
    assert "watching every process" in agent.start_lines[-1], agent.start_lines
    # Started after the agent: covered by the path-based attach.
    a = workload("--paths", "cuLaunchKernel", "--duration", "2", "--sleep-ms", "2", shim=agent.shim)
    b = workload("--paths", "cudaLaunchKernel", "--duration", "2", "--sleep-ms", "2", shim=agent.shim)
    victim = workload(
        "--paths", "cuLaunchKernelEx", "--duration", "30", "--sleep-ms", "2", GPU_AGENT_FLUSH_MS="200", shim=agent.shim
    )  # SIGKILL skips the exit flush
    time.sleep(1.0)
    victim.kill()  # dies mid-run; the agent must keep going
    assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0
    later = workload("--paths", "cuGraphLaunch", "--iters", "50", shim=agent.shim)
    assert later.wait(timeout=60) == 0
    time.sleep(1.5)
    assert agent.proc.poll() is None, "the agent died with a workload"
    lines = agent.stop()
    assert "processes=" in lines and "drops=" in lines
    # Only this test's processes: the agent profiles the node, where others may run
    # the same mock kernels (another test, beside it).
    ours = {str(p.pid) for p in (a, b, victim, later)}
    samples = [s for s in agent.samples() if s.labels.get("pid") in ours]
    assert pids_with(samples, "k_cuLaunchKernel(") == {str(a.pid)}
    assert pids_with(samples, "k_cudaLaunchKernel(") == {str(b.pid)}
    assert pids_with(samples, "k_cuLaunchKernelEx(") == {str(victim.pid)}
    assert pids_with(samples, "k_cuGraphLaunch_node") == {str(later.pid)}
    for s in samples:
        if s.labels["pid"] == str(a.pid) and "[unsampled]" not in s.frames:
            assert "launch_cuLaunchKernel" in s.frames


def test_process_running_before_the_agent_is_attached_to(tmp_path, built):
    need_ebpf()
    # Outlives the agent's start however long it takes (BPF compile and verify: ~3.5 s on 2
    # cores, more on a loaded CI host); killed 2.5 s after it, so its records come from the
    # periodic flushes.
    early = workload("--paths", "cuLaunchKernel", "--duration", "120", "--sleep-ms", "2", GPU_AGENT_FLUSH_MS="200")
    time.sleep(0.5)  # the shim is loaded and idle: nothing is attached yet
    a = Agent(tmp_path / "profiles")
    try:
        time.sleep(2.5)
        assert early.poll() is None, "the early process ended before the test could kill it"
        early.kill()
        early.wait(timeout=60)
        time.sleep(1.5)
    finally:
        a.stop()
    samples = a.samples()
    mine = [s for s in samples if s.labels.get("pid") == str(early.pid)]
    assert mine, "a process started before the agent was not profiled"
    assert any("launch_cuLaunchKernel" in s.frames for s in mine)


def test_agent_killed_mid_run_app_finishes_normally(tmp_path, built):
    need_ebpf()
    shim = private_shim(tmp_path / "shim")  # no other agent on the host holds its semaphore
    a = Agent(tmp_path / "profiles", "--shim", shim, "--discover-interval", "0")
    app = workload(
        "--paths",
        "cuLaunchKernel,cudaGraphLaunch",
        "--duration",
        "120",  # ended by SIGUSR1 once the shim has detached
        "--sleep-ms",
        "1",
        GPU_AGENT_DEBUG="1",
        CUDA_INJECTION64_PATH=str(shim),
    )
    lines, attached, detached = [], threading.Event(), threading.Event()

    def read_stderr():
        for line in app.stderr:
            lines.append(line)
            if "attached (pid" in line:
                attached.set()
            if "detached (pid" in line:
                detached.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    # Killed once the shim says it attached (GPU_AGENT_DEBUG=1), not a fixed second after
    # the app's start: on a loaded host the app may not have attached by then. The app
    # runs until the shim says it detached (a 3 s run once ended first, beside another
    # test's agent), then SIGUSR1 ends its loop.
    in_time = attached.wait(timeout=30)
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait()
    noticed = detached.wait(timeout=30)
    app.send_signal(signal.SIGUSR1)
    assert app.wait(timeout=60) == 0, "".join(lines)
    reader.join(timeout=10)
    err = "".join(lines)
    assert in_time, err
    # The kernel dropped the semaphore when the agent's uprobe went away; the shim noticed and
    # released CUPTI, and said so (GPU_AGENT_DEBUG=1), without any error.
    assert noticed and "detached (pid" in err and "agent gone" in err, err
    assert "error" not in err.lower(), err


def health_of(agent) -> tuple[int, str]:
    p = subprocess.run(agent_cmd("health", "--pid", str(agent.proc.pid)), capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout


def healthy_again(agent, within_s: float) -> str:
    end = time.monotonic() + within_s
    while True:
        rc, out = health_of(agent)
        if rc == 0 or time.monotonic() > end:
            assert rc == 0, out
            return out
        time.sleep(0.3)


def test_health_says_unhealthy_when_the_agent_stops_closing_windows(agent):
    """Loaded BPF programs are not enough: an agent stuck for 3 intervals (here:
    stopped with SIGSTOP, as a blocked open() would hold it) is unhealthy, so the
    liveness probe restarts it. Once it runs again its late window is said for 3
    intervals; then it is healthy."""
    rc, out = health_of(agent)
    assert rc == 0 and out.startswith("healthy"), out
    os.kill(agent.proc.pid, signal.SIGSTOP)
    try:
        time.sleep(3.5)  # 3 intervals of 1 s, and a little
        rc, out = health_of(agent)
        assert rc == 1 and "stuck" in out, out
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    # Once it closes a window again (0.5 s was not always enough beside another
    # worker's agent: still "stuck"), that window was late, for 3 intervals.
    end = time.monotonic() + 10
    while True:
        rc, out = health_of(agent)
        if "stuck" not in out or time.monotonic() > end:
            break
        time.sleep(0.1)
    assert rc == 1 and "late" in out, out
    healthy_again(agent, 6)
    agent.stop()


def test_health_says_unhealthy_while_profiles_are_dropped(agent):
    """Issue 30: slow connections once took the agent to its fd limit; it dropped
    profiles ("Too many open files") while `health` said healthy. Here the agent's
    fd limit is lowered to the fds it holds: its profiles are dropped, `health` says
    so, and once the limit is back it is healthy again."""
    import resource

    pid = agent.proc.pid
    app = workload("--duration", "60", "--sleep-ms", "2", shim=agent.shim)  # kernels in every window: profiles to write
    time.sleep(1.5)
    rc, out = health_of(agent)
    assert rc == 0, out
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)

    def no_fd_left() -> None:
        """The limit at the lowest fd free now. Again at every look: an fd the agent
        held for a moment when it was set (a file it symbolizes) frees a place below
        the limit once closed, and a profile write took it (a three-worker suite saw
        no drop in 5 s, 2026-12-03)."""
        used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (min(set(range(len(used) + 1)) - used), hard))

    try:
        end, out = time.monotonic() + 30, ""  # a drop comes at the next write: a 1 s interval
        while time.monotonic() < end and "dropped" not in out:
            no_fd_left()
            time.sleep(0.5)
            rc, out = health_of(agent)
        assert rc == 1 and "dropped" in out, out
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    healthy_again(agent, 6)
    app.kill()
    app.wait()
    agent.stop()


def test_a_job_that_ran_between_windows_is_said_not_hidden(agent):
    """A short job whose launches all fall between collection windows has no kernel
    in the profile (it is seen one time in N, and then counted N times). The status
    line says that a process attached and had no kernel in a window, instead of a
    bare processes=0; and so does the profile of another process's kernels."""
    busy = workload(
        "--paths", "cuLaunchKernel", "--duration", "4", "--sleep-ms", "2", GPU_AGENT_FLUSH_MS="200", shim=agent.shim
    )  # continuous
    time.sleep(1.5)  # its kernels are in the profiles before the short job comes
    w = workload("--iters", "3", GPU_AGENT_DUTY_CYCLE="100000", GPU_AGENT_WINDOW_MS="1", shim=agent.shim)
    assert w.wait(30) == 0, w.stderr.read()
    assert busy.wait(30) == 0, busy.stderr.read()
    time.sleep(2.5)  # two intervals
    out = agent.stop()
    assert "attached_without_kernels=1" in out, out
    # ... and so does the profile, for a reader of the file alone.
    from gpu_agent.proto import profile_pb2

    said = []
    for f in sorted(agent.out_dir.glob("*.pb.gz")):
        p = profile_pb2.Profile()
        p.ParseFromString(gzip.decompress(f.read_bytes()))
        said += [p.string_table[c] for c in p.comment if "show no kernel in this profile" in p.string_table[c]]
    assert said and said[0].startswith("1 attached process"), said
