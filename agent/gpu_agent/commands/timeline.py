"""`gpu-agent timeline merge`: a captured timeline (the NDJSON events that `record
--events` or `trace --events` wrote) with .nanotrace files of in-kernel events,
placed under the kernels that ran them, written as a Perfetto, Chrome or
nanotrace trace (-o) and as NDJSON events again (--events).
`record --nanotrace` does the same at the end of a capture (docs/timeline.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from .common import output_error
from .timeline_out import TRACE_FORMATS, add_events_mode, add_nanotrace_memory, merge_nanotrace, write_trace


def add_parser(sub) -> None:
    p = sub.add_parser("timeline", help="work on captured timelines (merge .nanotrace files into one)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    m = verbs.add_parser("merge", help="a timeline's kernels with .nanotrace files' in-kernel events")
    m.add_argument(
        "events",
        type=Path,
        metavar="EVENTS.ndjson",
        help="the timeline: NDJSON events from `record --events` or `trace --events`",
    )
    m.add_argument(
        "nanotrace", nargs="+", metavar="IN.nanotrace[@N]", help="version 1 or 4; @N: the N-th launch of its kernel"
    )
    m.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help="the merged trace")
    m.add_argument(
        "--events",
        dest="events_out",
        type=Path,
        default=None,
        metavar="OUT.ndjson",
        help="the merged timeline as NDJSON events, in-kernel events included",
    )
    add_events_mode(m)
    add_nanotrace_memory(m)
    m.add_argument(
        "--trace-format",
        choices=TRACE_FORMATS,
        default="perfetto",
        help="perfetto (protobuf, for ui.perfetto.dev; default), chrome (JSON) or nanotrace (version 4)",
    )
    m.set_defaults(func=main)


def main(args) -> int:
    from ..system.atomic import outputs_for_invoker
    from ..timeline.events_ndjson import EventsError, read_events, write_events

    outputs_for_invoker()  # under sudo, the user's files, created as they would create them
    outs = [p for p in (args.output, args.events_out) if p is not None]
    why = next(filter(None, map(output_error, outs)), "") if outs else "give -o FILE, --events OUT.ndjson, or both"
    if why:
        print(f"gpu-agent: error: {why}", file=sys.stderr)
        return 2
    try:
        tl = read_events(args.events)
    except EventsError as e:
        print(f"gpu-agent: error: {e}", file=sys.stderr)
        return 2
    before = len(tl.inkernel)  # an events file merged before brings its own
    merge_nanotrace(tl, args.nanotrace, args.nanotrace_memory)
    if args.output:
        write_trace(tl, args.output, args.trace_format)
    if args.events_out:
        write_events(tl, args.events_out, args.events_mode)
    placed = sum(len(ik.events) for ik in tl.inkernel)
    print(
        f"gpu-agent: {len(tl.kernels)} kernels, {placed} in-kernel events of {len(tl.inkernel)} kernel(s) "
        f"-> {', '.join(map(str, outs))}",
        file=sys.stderr,
    )
    return 0 if len(tl.inkernel) > before else 1
