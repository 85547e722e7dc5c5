"""`gpu-agent run`: profile every process on the node that loads the shim.

Processes that start later are covered too: the probes are attached by library
path, so the kernel instruments every mapping of the shim, present or future.
Copies of the shim at other paths (a container image that bakes its own) are
other files: they are found in /proc/*/maps at start and every
--discover-interval, and the same programs are attached to them
(BpfSession.discover).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from . import config
from ..system import k8s
from ..probes import preflight
from ..join.collector import Collector
from ..probes.paths import shim_path
from . import health, kube, ui
from .common import byte_size, duration, say_loading, status_line
from .outputs import Outputs, add_arguments as add_output_arguments


# How often held intervals are checked for their shims' publications (`published`).
SHIP_CHECK_S = 0.5


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="profile every process on this node that loads the shim")
    p.add_argument(
        "--output-dir",
        default=None,
        type=Path,
        help="directory for one gzip pprof per interval (default ./profiles when no "
        "--remote-store/--otlp-endpoint is given, else none)",
    )
    p.add_argument(
        "--max-store-bytes",
        default=1 << 30,
        metavar="SIZE",
        type=lambda t: 0 if t.strip() == "0" else byte_size(t),
        help="most bytes of profiles kept in --output-dir; the oldest go first (default 1GiB; 0: no bound)",
    )
    p.add_argument("--interval", default=10.0, type=duration, help="profile window, e.g. 10s, 500ms (default 10s)")
    p.add_argument(
        "--duration", default=None, type=duration, help="stop after this long (default: run until SIGINT/SIGTERM)"
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="return once the agent watches, leaving it running in the background (it prints its "
        "pid: `kill PID` stops it); a job started after this command is profiled",
    )
    p.add_argument("--shim", default=None, help="shim library to attach to (default: the bundled one)")
    p.add_argument(
        "--discover-interval",
        default=5.0,
        type=_interval_or_off,
        help="how often to look for other copies of the shim mapped by running "
        "processes, e.g. in containers (default 5s; 0 turns it off)",
    )
    add_output_arguments(p)
    ui_group = p.add_argument_group("web UI over --output-dir (docs/ui.md)")
    ui.add_listen_arguments(ui_group, "--ui", None)
    kube.add_arguments(p)
    config.enable(p, "run")  # every flag also from $GPU_AGENT_RUN_<FLAG> and the config file
    p.set_defaults(func=main)


def _interval_or_off(text: str) -> float:
    return 0.0 if text.strip() in ("0", "off") else duration(text)


def discover(collector: Collector) -> None:
    """Attach to shim copies that appeared since the last scan; say so on stderr."""
    session = collector.session
    errors = dict(session.discover_errors)
    try:
        found = session.discover()
    except Exception as e:  # a scan must never stop the agent; the next one retries
        print(f"gpu-agent: looking for shim copies failed: {e}", file=sys.stderr, flush=True)
        return
    for f in found:
        what = "parcagpu library " if f.source == "parcagpu" else ""
        print(
            f"gpu-agent: also watching {what}{f.path} (pid {f.pid}, through {f.attach_path})",
            file=sys.stderr,
            flush=True,
        )
    for path, why in session.discover_errors.items():
        if path not in errors:
            print(f"gpu-agent: not watching {path}: {why}", file=sys.stderr, flush=True)
    if session.parcagpu is not None:
        for path in session.parcagpu.released:
            print(
                f"gpu-agent: no process maps parcagpu library {path} any more: detached, its sites freed",
                file=sys.stderr,
                flush=True,
            )
        session.parcagpu.released.clear()


def write_window(collector: Collector, outputs: Outputs, quiet: bool = False, final: bool = False) -> Path | None:
    """Close the interval and ship the ones that are ready (local file, backends); the
    last local path, or None if nothing was written locally or backpressure keeps
    the interval open."""
    return said(collector, outputs, outputs.window_due(final=final), quiet)


def said(collector: Collector, outputs: Outputs, shipped, quiet: bool = False) -> Path | None:
    """One status line per interval shipped."""
    path = None
    for stats, path in shipped or []:
        if not quiet:
            line = (
                status_line(stats, collector.counters())
                + f" shims={collector.session.attached_files()}"
                + outputs.status()
            )
            print(f"gpu-agent: {line}" + (f" -> {path}" if path else ""), flush=True)
    return path


# --detach: the agent in the background says on this descriptor that it watches.
READY_FD_ENV = "GPU_AGENT_READY_FD"


def detach(argv: list[str]) -> int:
    """`run --detach`: the same command without --detach, in a session of its own, with
    this terminal's stdout and stderr (its lines still show, as with `&`); this one
    returns once it says it watches, or with its exit code if it ends first (its error
    already said). A newcomer's `run &` returned at once, and a job started next was
    over before the probes watched (issue 45)."""
    import subprocess

    r, w = os.pipe()
    args = [a for a in argv if a != "--detach"]
    child = subprocess.Popen(
        [sys.executable, "-m", "gpu_agent", *args],
        stdin=subprocess.DEVNULL,
        pass_fds=(w,),
        env={**os.environ, READY_FD_ENV: str(w)},
        start_new_session=True,
    )
    os.close(w)
    with os.fdopen(r, "rb") as f:
        ready = f.read(6) == b"ready\n"
    if not ready:
        return child.wait()
    print(f"gpu-agent: watching in the background as pid {child.pid}; `kill {child.pid}` stops it", file=sys.stderr)
    return 0


class _Forgiving:
    """A detached agent's stderr: the terminal it was started from may close (its
    writes then fail with EIO), and the agent goes on without its lines."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _say_ready() -> None:
    """Tell `run --detach` that the probes watch (READY_FD_ENV), once; from here the
    agent's lines go to a terminal that may close."""
    fd = os.environ.pop(READY_FD_ENV, "")
    if fd.isdigit():
        try:
            os.write(int(fd), b"ready\n")
            os.close(int(fd))
        except OSError:
            pass
        sys.stdout, sys.stderr = _Forgiving(sys.stdout), _Forgiving(sys.stderr)


def main(args) -> int:
    preflight.check()
    if args.detach:
        return detach(sys.argv[1:])
    shim = Path(args.shim).resolve() if args.shim else shim_path()
    stop = {"now": False}

    def _stop(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)

    pods = k8s.from_args(args)
    if pods is not None:
        pods.start()
        pods.wait_ready(5.0)  # the first list, so the first window already has pod labels
        k8s.configure(pods)
        print(f"gpu-agent: pod labels from {pods.source.url}", file=sys.stderr, flush=True)
    collector = Collector(str(shim))
    outputs = Outputs(args, collector)
    ui_server = None
    if args.ui:
        store = next((b.dir for b in outputs.backends if b.name == "local"), None)
        if store is None:
            print("gpu-agent: error: --ui shows the local store: give --output-dir too", file=sys.stderr)
            outputs.close(flush_timeout=0)
            return 2
        ui_server = ui.start(store, args.ui, args.ui_token_file, health=lambda: outputs.last_health)
    say_loading("watching (it says `watching` once it is: start the jobs to profile after that)")
    collector.open()
    if args.discover_interval:
        discover(collector)  # processes already running with their own copy
    print(
        f"gpu-agent: watching every process that maps {shim} (pid {os.getpid()}); "
        f"profiles every {args.interval:g}s {outputs.describe()}",
        file=sys.stderr,
        flush=True,
    )
    print(
        "gpu-agent: processes collect in windows that cost them at most "
        "GPU_AGENT_OVERHEAD_BUDGET (2 %) of their time, at least one in every 30 s, and their "
        "figures are estimates; a job shorter than a second may not show at all: "
        "`gpu-agent record -- CMD` profiles one job exactly",
        file=sys.stderr,
        flush=True,
    )
    _say_ready()
    started = time.monotonic()
    beats = health.Beats(args.interval)
    next_window = started + args.interval
    next_discover = started + args.discover_interval
    next_ship = started
    try:
        while not stop["now"]:
            now = time.monotonic()
            if args.duration is not None and now - started >= args.duration:
                break
            if args.discover_interval and now >= next_discover:
                discover(collector)
                next_discover = time.monotonic() + args.discover_interval
            collector.poll(int(max(1, min(100, (next_window - now) * 1000))))
            outputs.tick()
            if time.monotonic() >= next_window:
                write_window(collector, outputs)
                beats.window(outputs.dropped_profiles())
                next_window += args.interval
            elif collector.holding() and time.monotonic() >= next_ship:
                # intervals waiting for their shims' periods: ship each once they are in
                collector.drain()
                said(collector, outputs, outputs.ship_ready())
                next_ship = time.monotonic() + SHIP_CHECK_S
        # A stop: every shim publishes what it holds, then the last partial interval
        # and every held one go; nothing aggregated so far is lost.
        left = collector.let_go()
        if left:
            print(
                f"gpu-agent: {left} process(es) did not publish their last period before the stop "
                "(another agent keeps them attached): their launches since their last published period "
                "are not in these profiles",
                file=sys.stderr,
                flush=True,
            )
        write_window(collector, outputs, final=True)
    finally:
        if ui_server is not None:
            ui_server.shutdown()
            ui_server.server_close()
        collector.close()
        outputs.close()
        beats.close()
        if pods is not None:
            k8s.configure(None)
            pods.stop()
    return 0
