"""`gpu-agent health`: exit 0 when a `gpu-agent run` of this container has its eBPF
programs loaded and is still closing windows.

For the image's HEALTHCHECK and the DaemonSet's liveness/readiness probes. It
finds the `gpu-agent run` process among those in the same cgroup as itself
(the same container, also when the pod shares the host's PID namespace) and
checks that it holds at least one BPF program (an fd whose fdinfo has
`prog_type`): alive, past preflight and attached. It then checks the agent's
heartbeat (HEARTBEAT_DIR/run-PID, touched at every window): an agent that has
closed no window for 3 intervals is stuck, however many programs it holds.
One line on stdout says why.
"""

from __future__ import annotations

import os
import sys
import time

from ..atomic import write_atomic

HEARTBEAT_DIR = "/run/gpu-agent"
STUCK_INTERVALS = 3


def heartbeat_path(pid: int) -> str:
    return f"{HEARTBEAT_DIR}/run-{pid}"


def beat(interval_s: float) -> None:
    """`run`, at start and at every window: the file's mtime is the heartbeat, its
    text the interval. Best effort: an agent that cannot write it still runs."""
    path = heartbeat_path(os.getpid())
    try:
        if not os.path.exists(path):  # the first beat: forget agents killed without a goodbye
            for name in os.listdir(HEARTBEAT_DIR) if os.path.isdir(HEARTBEAT_DIR) else ():
                pid = name[len("run-"):]
                if name.startswith("run-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                    os.unlink(os.path.join(HEARTBEAT_DIR, name))
            os.makedirs(HEARTBEAT_DIR, mode=0o755, exist_ok=True)
            write_atomic(path, f"{interval_s:g}\n".encode())
        else:
            os.utime(path)
    except OSError:
        pass


def forget() -> None:
    try:
        os.unlink(heartbeat_path(os.getpid()))
    except OSError:
        pass


def stuck_for(pid: int) -> float | None:
    """Seconds past STUCK_INTERVALS intervals since the agent's last window, or None."""
    try:
        st = os.stat(heartbeat_path(pid))
        with open(heartbeat_path(pid)) as f:
            interval = float(f.read().strip() or 0)
    except (OSError, ValueError):
        return None  # an agent that writes no heartbeat is judged by its programs alone
    age = time.time() - st.st_mtime
    return age if interval > 0 and age > STUCK_INTERVALS * interval else None


def add_parser(sub) -> None:
    p = sub.add_parser("health", help="exit 0 if this container's `gpu-agent run` has its probes loaded")
    p.add_argument("--pid", type=int, default=None, help="check this process instead of searching")
    p.set_defaults(func=main)


def _read(path: str, mode: str = "r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def _is_agent_run(pid: int) -> bool:
    raw = _read(f"/proc/{pid}/cmdline", "rb")
    if not raw:
        return False
    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
    joined = " ".join(argv)
    return ("gpu-agent" in joined or "gpu_agent" in joined) and "run" in argv[1:] and "health" not in argv


def find_agents() -> list[int]:
    mine = _read("/proc/self/cgroup")
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        if _read(f"/proc/{pid}/cgroup") == mine and _is_agent_run(pid):
            out.append(pid)
    return sorted(out)


def bpf_programs(pid: int) -> int:
    n = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return -1
    for fd in fds:
        info = _read(f"/proc/{pid}/fdinfo/{fd}")
        if info and "prog_type:" in info:
            n += 1
    return n


def main(args) -> int:
    pids = [args.pid] if args.pid else find_agents()
    if not pids:
        print("unhealthy: no `gpu-agent run` process in this container")
        return 1
    for pid in pids:
        n = bpf_programs(pid)
        if n > 0:
            stuck = stuck_for(pid)
            if stuck is not None:
                print(f"unhealthy: gpu-agent run (pid {pid}) has closed no window for {stuck:.0f}s "
                      f"(over {STUCK_INTERVALS} intervals): stuck")
                return 1
            print(f"healthy: gpu-agent run (pid {pid}) holds {n} BPF programs")
            return 0
    print(f"unhealthy: gpu-agent run (pid {', '.join(map(str, pids))}) has no BPF program loaded "
          "(starting, or failed preflight)")
    sys.stdout.flush()
    return 1
