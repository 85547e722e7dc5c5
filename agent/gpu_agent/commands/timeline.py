"""`gpu-agent timeline merge`: a captured timeline (the NDJSON events that `record
--events` or `trace --events` wrote) with .nanotrace files of in-kernel events,
placed under the kernels that ran them, written as a Perfetto or Chrome trace.
`record --nanotrace` does the same at the end of a capture (docs/timeline.md)."""

from __future__ import annotations

import sys
from pathlib import Path

from .common import output_error
from .timeline_out import TRACE_FORMATS, merge_nanotrace, write_trace


def add_parser(sub) -> None:
    p = sub.add_parser("timeline", help="work on captured timelines (merge .nanotrace files into one)")
    verbs = p.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    m = verbs.add_parser("merge", help="a timeline's kernels with .nanotrace files' in-kernel events")
    m.add_argument("events", type=Path, metavar="EVENTS.ndjson",
                   help="the timeline: NDJSON events from `record --events` or `trace --events`")
    m.add_argument("nanotrace", nargs="+", metavar="IN.nanotrace[@N]",
                   help="version 1 or 4; @N: the N-th launch of its kernel")
    m.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="the merged trace")
    m.add_argument("--trace-format", choices=TRACE_FORMATS, default="perfetto",
                   help="perfetto (protobuf, for ui.perfetto.dev; default), chrome (JSON) or nanotrace "
                        "(version 4)")
    m.set_defaults(func=main)


def main(args) -> int:
    from ..timeline.events_ndjson import EventsError, read_events
    why = output_error(args.output)
    if why:
        print(f"gpu-agent: {why}", file=sys.stderr)
        return 2
    try:
        tl = read_events(args.events)
    except EventsError as e:
        print(f"gpu-agent: {e}", file=sys.stderr)
        return 2
    merge_nanotrace(tl, args.nanotrace)
    write_trace(tl, args.output, args.trace_format)
    placed = sum(len(ik.events) for ik in tl.inkernel)
    print(f"gpu-agent: {len(tl.kernels)} kernels, {placed} in-kernel events of {len(tl.inkernel)} kernel(s) "
          f"-> {args.output}", file=sys.stderr)
    return 0 if tl.inkernel else 1
