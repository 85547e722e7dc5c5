"""`gpu-agent health`: exit 0 when a `gpu-agent run` of this container has its eBPF
programs loaded and is still closing windows.

For the image's HEALTHCHECK and the DaemonSet's liveness/readiness probes. It
finds the `gpu-agent run` process among those in the same cgroup as itself
(the same container, also when the pod shares the host's PID namespace) and
checks that it holds at least one BPF program (an fd whose fdinfo has
`prog_type`): alive, past preflight and attached. It then checks the agent's
heartbeat (HEARTBEAT_DIR/run-PID, touched at every window): an agent that has
closed no window for 3 intervals is stuck, however many programs it holds. The
heartbeat also says whether the last window was a fault: its profile dropped
(the store or a backend refused it: a full disk, no fds left, a queue over
its bound) or late (more than LATE_INTERVALS intervals after the one before).
A window that holds no kernel is not a fault. One line on stdout says why.
"""

from __future__ import annotations

import os
import sys
import time

from ..system.atomic import write_atomic

HEARTBEAT_DIR = "/run/gpu-agent"
STUCK_INTERVALS = 3
LATE_INTERVALS = 2


def heartbeat_path(pid: int) -> str:
    return f"{HEARTBEAT_DIR}/run-{pid}"


class Beats:
    """`run`'s heartbeat (HEARTBEAT_DIR/run-PID), one beat per window closed: its
    mtime is the beat; its text the interval and a fault (a profile dropped, or a
    window late), said for STUCK_INTERVALS intervals after it, so that a probe run
    every few intervals sees it. The file stays open and is rewritten in place
    (a fixed-size record): an agent out of fds still beats and says why. Best
    effort: an agent that cannot write it still runs."""

    SIZE = 512

    def __init__(self, interval_s: float, clock=time.monotonic):
        self.interval, self._clock = interval_s, clock
        self._last = clock()
        self._dropped = 0
        self._fault, self._fault_until = "", 0.0
        self._fd = -1
        try:
            for name in os.listdir(HEARTBEAT_DIR) if os.path.isdir(HEARTBEAT_DIR) else ():
                pid = name[len("run-") :]  # agents killed without a goodbye
                if name.startswith("run-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                    os.unlink(os.path.join(HEARTBEAT_DIR, name))
            os.makedirs(HEARTBEAT_DIR, mode=0o755, exist_ok=True)
            path = heartbeat_path(os.getpid())
            write_atomic(path, self._record(""))  # a new inode (0600), never a link
            self._fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            pass

    def _record(self, fault: str) -> bytes:
        return f"{self.interval:g}\n{fault}\n".encode()[: self.SIZE].ljust(self.SIZE, b" ")

    def window(self, dropped_total: int) -> None:
        """A window closed; dropped_total: profiles refused so far (by any output)."""
        now = self._clock()
        fault = window_fault(dropped_total - self._dropped, now - self._last, self.interval)
        self._last, self._dropped = now, dropped_total
        if fault:
            self._fault, self._fault_until = fault, now + STUCK_INTERVALS * self.interval
        if self._fd < 0:
            return
        try:
            os.pwrite(self._fd, self._record(self._fault if now < self._fault_until else ""), 0)
            os.utime(self._fd)
        except OSError:
            pass

    def close(self) -> None:
        """At the agent's end: no heartbeat left behind."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(heartbeat_path(os.getpid()))
        except OSError:
            pass


def window_fault(dropped: int, gap_s: float, interval_s: float) -> str:
    """What was wrong with the window just closed ('' if nothing): `dropped` profiles
    refused since the one before, `gap_s` seconds after it."""
    if dropped:
        return f"dropped {dropped} profile(s) in a recent window (the store or a backend refused them)"
    if gap_s > LATE_INTERVALS * interval_s:
        return f"closed a recent window {gap_s:.1f}s after the one before (interval {interval_s:g}s): late"
    return ""


def _heartbeat(pid: int) -> tuple[float, float, str] | None:
    """(age s, interval s, last window's fault) of the agent's heartbeat, or None."""
    try:
        st = os.stat(heartbeat_path(pid))
        with open(heartbeat_path(pid)) as f:
            interval, _, fault = f.read().partition("\n")  # a Beats record
        return time.time() - st.st_mtime, float(interval.strip() or 0), fault.strip()
    except (OSError, ValueError):
        return None  # an agent that writes no heartbeat is judged by its programs alone


def verdict(pid: int) -> str:
    """Why the agent's heartbeat says it is unhealthy ('' if it does not): stuck, or
    the fault its last windows had."""
    hb = _heartbeat(pid)
    if hb is None:
        return ""
    age, interval, fault = hb
    if interval > 0 and age > STUCK_INTERVALS * interval:
        return f"has closed no window for {age:.0f}s (over {STUCK_INTERVALS} intervals): stuck"
    return fault


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
            why = verdict(pid)
            if why:
                print(f"unhealthy: gpu-agent run (pid {pid}) {why}")
                return 1
            print(f"healthy: gpu-agent run (pid {pid}) holds {n} BPF programs")
            return 0
    print(
        f"unhealthy: gpu-agent run (pid {', '.join(map(str, pids))}) has no BPF program loaded "
        "(starting, or failed preflight)"
    )
    sys.stdout.flush()
    return 1
