"""`gpu-agent trace --pid PID|--pod NAME --duration 5s -o FILE`: a full-fidelity
kernel timeline of running processes, on demand, beside an always-on agent.

For the capture, each target's shim collects continuously: the agent writes a
CLOCK_MONOTONIC deadline into the shim's exported `gpu_agent_trace_until_ns`
(through /proc/PID/mem; the shim polls it, shim/src/window.cpp), and the shim
returns to its defaults at the deadline by itself, even if this command dies.
Other processes are untouched. One capture at a time on a node (a lock file)."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import sys
import time


from ..system import k8s
from ..probes import preflight
from ..system import procfs
from ..system.atomic import outputs_for_invoker
from ..join.collector import Collector
from ..timeline.target import NOT_MAPPED, TraceTarget
from . import kube, timeline_out
from .common import duration, say_loading

# The node's one capture: a 0600 lock in a 0700 directory of root's, never in /tmp,
# where any local user could hold it first and refuse every capture. (Not the
# trace.lock of earlier versions: it was 0644, and a local user's read-only fd on
# it held the lock.)
LOCK_DIR = "/run/gpu-agent"
LOCK_PATH = LOCK_DIR + "/capture.lock"
SETTLE_S = 1.5  # after the deadline: the shim closes its window and flushes (flush_ms 1000)
YOUNG_S = 15.0  # a target this young may not have loaded the shim yet: waited for


def add_parser(sub) -> None:
    p = sub.add_parser("trace", help="a timeline of every kernel of running processes, for a while")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pid", type=int, action="append", help="a process to trace (repeatable)")
    who.add_argument("--pod", help="every process of this pod that runs the shim")
    p.add_argument("--duration", type=duration, default=5.0, help="how long (default 5s)")
    timeline_out.add_arguments(p, trace_flag="-o")
    kube.add_arguments(p)  # --pod: which processes are the pod's
    p.set_defaults(func=main)


def main(args) -> int:
    preflight.check()
    if not timeline_out.wanted(args):
        return _error("trace needs -o FILE, --events FILE or --store DIR")
    outputs_for_invoker()  # under sudo, outputs are created as the invoker would create them
    why = timeline_out.unwritable(args)
    if why:
        return _error(f"{why}; nothing was traced")
    pods = k8s.from_args(args) if args.pod else None
    if pods is not None:
        pods.start()
        pods.wait_ready(5.0)
        k8s.configure(pods)
    targets = _targets(args)
    if isinstance(targets, str):
        return _error(targets)
    lock = _lock()
    if isinstance(lock, str):
        return _error(lock)
    shims = _open_targets(targets)
    bad = [f"{pid} ({w})" for pid, w in shims.items() if isinstance(w, str)]
    if bad:
        for t in shims.values():
            if not isinstance(t, str):
                t.close()
        return _error(f"cannot trace {', '.join(bad)}")
    pids = set(targets)
    say_loading(f"tracing pid {', '.join(map(str, sorted(pids)))} for {args.duration:g} s")
    collector = Collector(
        next(iter(shims.values())).reach, pid_filter=lambda p: p in pids, ringbuf_mib=timeline_out.RINGBUF_MIB
    )
    collector.open()
    try:

        def back_to_defaults():  # backpressure: the targets stop collecting every kernel
            for t in shims.values():
                t.write(0)

        timeline = timeline_out.collector_for(args, collector, on_pause=back_to_defaults)
        collector.session.set_trace(pids=tuple(pids))
        started = time.time_ns()
        deadline = time.monotonic_ns() + int(args.duration * 1e9)
        for pid, t in shims.items():
            if not t.write(deadline):
                print(
                    f"gpu-agent: pid {pid} is no longer the process that was checked (it exited or exec'd): not traced",
                    file=sys.stderr,
                )
        # the capture runs from here: said, so that whoever starts the work it should
        # see knows when (a test slept 3 s for it, and a loaded host outran that)
        print(
            f"gpu-agent: capturing pid {', '.join(map(str, sorted(pids)))} for {args.duration:g} s",
            file=sys.stderr,
            flush=True,
        )
        try:
            end = time.monotonic() + args.duration + SETTLE_S
            while time.monotonic() < end:
                collector.poll(100)
        finally:
            for t in shims.values():  # back to the defaults now, if we stop early
                t.write(0)
        collector.poll(50)
        tl = timeline.build(started, time.time_ns())
        # The capture's span only: before the deadline reached the shim and after it
        # passed, the always-on windows were collecting, one in N.
        until = started + int(args.duration * 1e9)
        tl.kernels = [k for k in tl.kernels if started <= k.start_ns <= until]
        tl.ended_ns = until
        written = timeline_out.write(args, tl)
        for path in written:
            print(
                f"gpu-agent: {timeline_out.summary(tl)} of {len(tl.processes)} process(es) -> {path}", file=sys.stderr
            )
    finally:
        collector.close()
        for t in shims.values():
            t.close()
    return 0


def _open_targets(pids) -> dict:
    """Each target checked, or why not. A process started less than YOUNG_S ago that
    maps no shim file at all yet (`python serve.py & gpu-agent trace --pid $!`: it is
    still importing, or before cuInit) is waited for until it is YOUNG_S old, with a
    word on stderr; an older one fails at once."""
    shims = {pid: TraceTarget.open(pid) for pid in pids}
    said = False
    while True:
        young = [pid for pid, t in shims.items() if t == NOT_MAPPED and 0 <= _age_s(pid) < YOUNG_S]
        if not young:
            return shims
        if not said:
            print(
                f"gpu-agent: waiting for pid {', '.join(map(str, young))} to load the shim "
                f"(until it is {YOUNG_S:.0f} s old)...",
                file=sys.stderr,
                flush=True,
            )
            said = True
        time.sleep(0.2)
        for pid in young:
            shims[pid] = TraceTarget.open(pid)


def _age_s(pid: int) -> float:
    """Seconds since the process started, or -1 when it is gone."""
    ticks = procfs.start_ticks(pid)
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return -1.0
    return -1.0 if ticks is None else uptime - ticks / os.sysconf("SC_CLK_TCK")


def _error(msg: str) -> int:
    print(f"gpu-agent: error: {msg}", file=sys.stderr)
    return 2


def _targets(args):
    if args.pid:
        gone = [p for p in args.pid if not os.path.exists(f"/proc/{p}")]
        return f"no process {', '.join(map(str, gone))}" if gone else list(dict.fromkeys(args.pid))
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and k8s.proc_labels(int(d)).get("pod") == args.pod:
            t = TraceTarget.open(int(d))
            if not isinstance(t, str):
                t.close()
                pids.append(int(d))
    return pids or f"no process of pod {args.pod!r} runs the gpu-agent shim"


def _lock():
    """The node's one capture: an flock held for this process's life, on a 0600 file
    in LOCK_DIR (0700, root's). Or why not."""
    try:
        os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
        st = os.lstat(LOCK_DIR)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return f"{LOCK_DIR} is not a directory that only this user writes; remove it"
        os.chmod(LOCK_DIR, 0o700, follow_symlinks=False)
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as e:
        return f"cannot create the capture lock {LOCK_PATH}: {e.strerror}"
    f = os.fdopen(fd, "r+")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        f.close()
        return f"{LOCK_PATH} is not a regular file of this user; remove it"
    os.fchmod(fd, 0o600)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        f.seek(0)
        holder = f.read(32).strip() or "?"
        f.close()
        return f"another capture is running (pid {holder}); one at a time"
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f
