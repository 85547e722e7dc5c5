"""The timeline outputs that `record` and `trace` share: their flags, the check
that they can be written (before anything runs), and the writing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..timeline.collect import DEFAULT_RING, RETENTIONS
from .common import byte_size, output_error, positive_int

TRACE_FORMATS = ("perfetto", "chrome", "nanotrace")
# The BPF ring buffer while a timeline is captured: on an H100, a CUDA-graph replay
# loop made about 76 000 kernels a second, and 4 MiB lost half of their events.
RINGBUF_MIB = 128
EVENTS_MODES = ("dedup", "full", "nostack")


def add_events_mode(p) -> None:
    """--events-mode, for every command that writes NDJSON events."""
    p.add_argument(
        "--events-mode",
        choices=EVENTS_MODES,
        default="dedup",
        help="dedup: each stack once, kernels refer to it; full: stacks inline; nostack: no stacks",
    )


def add_arguments(p, trace_flag: str = "--trace") -> None:
    p.add_argument(
        trace_flag,
        dest="trace",
        type=Path,
        default=None,
        metavar="FILE",
        help="write a timeline of every kernel (Perfetto's protobuf trace; --trace-format chrome for chrome://tracing)",
    )
    p.add_argument(
        "--trace-format",
        choices=TRACE_FORMATS,
        default="perfetto",
        help="the --trace file's format: perfetto (protobuf, for ui.perfetto.dev; default), "
        "chrome (JSON, for chrome://tracing and speedscope) or nanotrace (version 4, for "
        "the nanotrace viewer)",
    )
    p.add_argument(
        "--events",
        type=Path,
        default=None,
        metavar="FILE.ndjson",
        help="write one JSON line per kernel, stacks once each (docs/events.schema.json)",
    )
    add_events_mode(p)
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        metavar="DIR",
        help="also put the timeline, as a Perfetto trace, into this profile store "
        "(gpu-agent run's --output-dir): `gpu-agent ui` shows it on its Timeline tab",
    )
    p.add_argument(
        "--nanotrace",
        action="append",
        default=[],
        metavar="FILE[@N]",
        help="put a .nanotrace file's in-kernel events (cutedsl-trace's version 1, nanotrace's "
        "version 4) under the kernel that ran them in the --trace timeline; @N: the N-th "
        "launch of its kernel (repeatable)",
    )
    add_nanotrace_memory(p)
    p.add_argument(
        "--ring",
        type=positive_int,
        default=DEFAULT_RING,
        metavar="EVENTS",
        help=f"kernel events kept (default {DEFAULT_RING}); what happens when it is full: --retention",
    )
    p.add_argument(
        "--retention",
        choices=RETENTIONS,
        default="drop-oldest",
        help="drop-oldest: keep the newest events, count the rest; backpressure: "
        "pause the capture when the ring is full, and say so",
    )


def collector_for(args, collector, on_pause=None):
    """The timeline collector these flags ask for, on collector's session."""
    from ..timeline.collect import TimelineCollector

    return TimelineCollector(collector, ring=args.ring, retention=args.retention, on_pause=on_pause)


def wanted(args) -> bool:
    return bool(args.trace or args.events or args.store)


def unwritable(args) -> str:
    """Why an output cannot be written ("" if all can): said before the workload runs."""
    for path in filter(None, (args.trace, args.events)):
        why = output_error(path)
        if why:
            return why
    if getattr(args, "nanotrace", None) and not wanted(args):
        return "--nanotrace goes into a timeline: give --trace FILE, --events FILE.ndjson or --store DIR"
    if args.store is not None and (args.store.is_symlink() or not args.store.is_dir()):
        return f"--store {args.store} is not a directory"
    return ""


def summary(timeline) -> str:
    """'N kernels', and what the capture lost, said where the user reads it
    (a Ctrl-C'd capture's ring overflows: the count is not only inside the file)."""
    lost: dict[str, int] = {}
    for d in timeline.drops:
        lost[d.what] = lost.get(d.what, 0) + d.count
    text = f"{len(timeline.kernels)} kernels"
    if sum(lost.values()):
        text += (
            f" ({sum(lost.values())} lost: " + ", ".join(f"{n} {what}" for what, n in sorted(lost.items()) if n) + ")"
        )
    return text


def add_nanotrace_memory(p) -> None:
    # (the reader's constants, timeline/nanotrace/model.py, spelt out: not imported at each start)
    p.add_argument(
        "--nanotrace-memory",
        type=byte_size,
        default=None,
        metavar="SIZE",
        help="the most one .nanotrace file may cost, read and placed (default 8GiB, and never past 128 x "
        "its inflated bytes); a file past it is refused in one line",
    )


def merge_nanotrace(timeline, files: list[str], memory: int | None = None) -> None:
    """Place each .nanotrace file under its kernel; one line each, on stderr."""
    from functools import partial

    from ..timeline.inkernel import parse_spec, place_all
    from ..timeline.nanotrace import read

    reader = partial(read, memory=memory) if memory else read
    for line in place_all(timeline, [parse_spec(f) for f in files], reader):
        print(f"gpu-agent: nanotrace: {line}", file=sys.stderr)


def write_trace(timeline, path: Path, fmt: str) -> None:
    """The timeline as one trace file in one of TRACE_FORMATS."""
    if fmt == "chrome":
        from ..timeline.chrome_trace import write_chrome

        write_chrome(timeline, path)
    elif fmt == "nanotrace":
        from ..timeline.nanotrace_trace import write_nanotrace

        write_nanotrace(timeline, path)
    else:
        from ..timeline.perfetto_trace import write_perfetto

        write_perfetto(timeline, path)


def write(args, timeline) -> list[Path]:
    written = []
    if getattr(args, "nanotrace", None):
        merge_nanotrace(timeline, args.nanotrace, getattr(args, "nanotrace_memory", None))
    store, stored = None, False  # root's file in root's store: not handed to the invoker
    if args.store is not None:
        from ..profile.store import TRACE_SUFFIX, file_name

        store = args.store / file_name(timeline.ended_ns or time.time_ns(), TRACE_SUFFIX)
    if args.trace:
        if args.trace_format != "perfetto":
            write_trace(timeline, args.trace, args.trace_format)
        else:  # and the store's copy from the same bytes
            from ..timeline.perfetto_trace import write_perfetto

            write_perfetto(timeline, args.trace, *([store] if store else []))
            stored = store is not None
        written.append(args.trace)
    if args.events:
        from ..timeline.events_ndjson import write_events

        write_events(timeline, args.events, args.events_mode)
        written.append(args.events)
    if store:
        if not stored:
            from ..timeline.perfetto_trace import write_perfetto

            write_perfetto(timeline, store)
        print(f"gpu-agent: {summary(timeline)} -> {store} (the store's Timeline tab)", file=sys.stderr)
    return written
