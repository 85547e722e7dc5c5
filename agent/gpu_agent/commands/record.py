"""`gpu-agent record -o FILE -- CMD ARGS...`: profile one command's process tree, like `perf record`.

The command runs with the shim injected (CUDA_INJECTION64_PATH, inherited by
its children), the probes are attached before it starts, and FILE is written
when it exits. The exit code is the command's own.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..probes import preflight
from ..system.atomic import outputs_for_invoker
from ..join.collector import Collector
from ..probes.paths import shim_path
from . import timeline_out
from .common import output_error, say_loading, status_line

DRAIN_EVERY_S = 1.0


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="run a command with the shim injected and profile it")
    p.add_argument(
        "-o", "--output", default="gpu.pb.gz", type=Path, help="gzip pprof file to write (default gpu.pb.gz)"
    )
    p.add_argument("--shim", default=None, help="shim library to inject (default: the bundled one)")
    p.add_argument(
        "--duty-cycle",
        type=int,
        default=None,
        metavar="N",
        help="collect in one time window of every N and scale by about N (an expert "
        "override of --budget); default here: 1, every kernel, exact "
        "(or GPU_AGENT_DUTY_CYCLE from the environment)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="PCT",
        help="collect in windows whose cost stays under PCT %% of the command's time, "
        "as `gpu-agent run` does (GPU_AGENT_OVERHEAD_BUDGET, 2 there); estimates, "
        "not every kernel",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line on stderr")
    timeline_out.add_arguments(p)
    # Everything from the first word that is not one of record's own flags is the
    # command, its flags included (`record python -c ...` needs no `--`).
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to profile")
    p.set_defaults(func=main)


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def descends_from(root: int):
    def check(pid: int) -> bool:
        seen = 0
        try:
            while pid > 1 and seen < 4096:
                if pid == root:
                    return True
                pid, seen = _ppid(pid), seen + 1
        except (OSError, ValueError):
            return False
        return pid == root

    return check


def exited(pid: int) -> bool:
    """Whether the command has exited, without reaping it. Its zombie keeps its pid and
    /proc/PID, which the pid filter reads, until the profile is built: a command whose
    events this agent first read after its exit was left out whole, silently (a graph
    job of a few ms beside a loaded suite: samples=0 drops=0)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def forward(pid: int, sig: int) -> None:
    """A terminal signal, to the command (unreaped until the end: the pid is still its)."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def main(args) -> int:
    preflight.check()
    shim = Path(args.shim).resolve() if args.shim else shim_path()
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        print("gpu-agent: error: record needs a command: gpu-agent record -o out.pb.gz -- CMD ARGS", file=sys.stderr)
        return 2

    if args.duty_cycle is not None and not 1 <= args.duty_cycle <= 100000:
        print("gpu-agent: error: --duty-cycle must be between 1 and 100000", file=sys.stderr)
        return 2
    if args.budget is not None and (args.duty_cycle is not None or not 0.01 <= args.budget <= 100):
        print(
            "gpu-agent: error: --budget takes a percentage between 0.01 and 100, without --duty-cycle", file=sys.stderr
        )
        return 2
    # Before the command runs: a profile that cannot be written loses the whole run.
    outputs_for_invoker()  # under sudo, outputs are created as the invoker would create them
    why = output_error(Path(args.output)) or timeline_out.unwritable(args)
    if why:
        print(f"gpu-agent: error: {why}; nothing was run", file=sys.stderr)
        return 2

    # Before the probes are compiled (seconds): a command that cannot run.
    if not shutil.which(cmd[0]):
        print(f"gpu-agent: error: cannot run {cmd[0]}: no such command; nothing was run", file=sys.stderr)
        return 127
    if not args.quiet:
        say_loading(f"running {cmd[0]}")

    root = {"pid": -1}
    collector = Collector(
        str(shim),
        pid_filter=lambda pid: descends_from(root["pid"])(pid),
        ringbuf_mib=timeline_out.RINGBUF_MIB if timeline_out.wanted(args) else 0,
        whole=True,
    )
    collector.open()  # probes are live before the command maps the shim
    timeline = None
    if timeline_out.wanted(args):
        timeline = timeline_out.collector_for(args, collector)
        collector.session.set_trace(every_process=True)  # the pid filter keeps the command's
    started_ns = time.time_ns()
    collector.interval.start_ns = started_ns  # the profile's Duration is the command's, not the set-up's
    env = dict(os.environ)
    env.setdefault("CUDA_INJECTION64_PATH", str(shim))
    # A one-off recording wants every kernel: continuous collection unless asked.
    if args.duty_cycle is not None:
        env["GPU_AGENT_DUTY_CYCLE"] = str(args.duty_cycle)
    elif args.budget is not None:  # the shim plans the windows: no fixed schedule
        env["GPU_AGENT_OVERHEAD_BUDGET"] = f"{args.budget:.2f}"
        env.pop("GPU_AGENT_DUTY_CYCLE", None)
        env.pop("GPU_AGENT_WINDOW_MS", None)
    else:
        env.setdefault("GPU_AGENT_DUTY_CYCLE", "1")
    try:
        child = subprocess.Popen(cmd, env=env)
    except OSError as e:
        collector.close()
        print(f"gpu-agent: error: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127
    root["pid"] = child.pid

    # Forward the usual terminal signals to the child; the agent exits when it does.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, f: forward(child.pid, s))

    try:
        last = time.monotonic()
        while not exited(child.pid):
            collector.poll(100)
            if time.monotonic() - last >= DRAIN_EVERY_S:
                collector.drain()  # keep BPF maps small on long runs
                last = time.monotonic()
        # The shim flushes its last activity buffer from an exit handler, before the
        # process is gone; collect what is left in the ring buffer and the maps.
        collector.poll(50)
        # The timeline first: the profile forgets processes that exited.
        tl = timeline.build(started_ns, time.time_ns()) if timeline is not None else None
        builder, stats = collector.build_profile()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        builder.write(args.output)
        written = timeline_out.write(args, tl) if tl is not None else []
        for path in written:
            if not args.quiet:
                print(f"gpu-agent: {timeline_out.summary(tl)} -> {path}", file=sys.stderr)
        if not args.quiet:
            print(f"gpu-agent: {status_line(stats, collector.counters())} -> {args.output}", file=sys.stderr)
    finally:
        collector.close()
    rc = child.wait()  # reaped only now: its pid stayed the command's
    return 128 + -rc if rc < 0 else rc
