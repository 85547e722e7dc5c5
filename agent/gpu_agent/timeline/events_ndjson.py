"""A Timeline as newline-delimited JSON, one object per line, in the spirit of
CUTracer's kernel-event NDJSON: easy to grep, to stream into jq or pandas, and
to append to. docs/events.schema.json is the schema of every line type and
docs/timeline.md shows them by example.

Lines, in order:
- one "header": schema version, host, clock, capture times, processes,
  threads, devices, and the mode the file was written in;
- "callstack_def" (dedup mode only): a stack, once, before the first kernel
  that refers to it;
- one "kernel" per kernel, in the Timeline's order;
- for each .nanotrace file merged under a kernel (timeline/inkernel.py): one
  "inkernel" (which kernel, by its place among the kernel lines), then its
  "inkernel_track"s, then its "inkernel_event"s;
- one "drop" per Timeline drop, last (drops are totals of the capture).
read_events reads such a file back into a Timeline (`gpu-agent timeline merge`).

Modes: "dedup" (the default) refers to stacks by id (stack_id,
replay_stack_id); "full" writes each kernel's frames inline (stack,
replay_stack), for tools that read one line at a time; "nostack" writes no
stacks at all, the smallest file.

Each line is written as it is made: memory grows with the distinct stacks,
not with the kernels."""

from __future__ import annotations

import json
import os

from ..system.atomic import private_output
from .model import (
    MAX_INKERNEL_EVENTS,
    SCHEMA_VERSION,
    Drop,
    Frame,
    InKernel,
    InKernelEvent,
    InKernelTrack,
    KernelEvent,
    Timeline,
)

MODES = ("dedup", "full", "nostack")


def _frame(f: Frame) -> dict:
    return {"name": f.name, "kind": f.kind, "file": f.file, "line": f.line}


def header(tl: Timeline, mode: str) -> dict:
    return {
        "type": "header",
        "schema_version": SCHEMA_VERSION,
        "mode": mode,
        "host": tl.host,
        "clock": tl.clock,
        "started_ns": tl.started_ns,
        "ended_ns": tl.ended_ns,
        "pids": [{"pid": pid, "comm": comm} for pid, comm in sorted(tl.processes.items())],
        "threads": [{"pid": pid, "tid": tid, "name": name} for (pid, tid), name in sorted(tl.threads.items())],
        "devices": [
            {"pid": pid, "ordinal": d.ordinal, "uuid": d.uuid, "model": d.model}
            for (pid, _), d in sorted(tl.devices.items())
        ],
        **({"monotonic_raw_pair": list(tl.monotonic_raw_pair)} if tl.monotonic_raw_pair else {}),
    }


def kernel(tl: Timeline, k: KernelEvent, mode: str) -> dict:
    line = {
        "type": "kernel",
        "pid": k.pid,
        "start_ns": k.start_ns,
        "end_ns": k.end_ns,
        "dur_ns": k.end_ns - k.start_ns,
        "name": k.name,
        "mangled": k.mangled,
        "device": k.device,
        "stream": k.stream,
        "context": k.context,
        "correlation_id": k.correlation_id,
        "graph_id": k.graph_id,
        "graph_node_id": k.graph_node_id,
    }
    if k.grid is not None:
        line["grid"] = list(k.grid)
    if k.block is not None:
        line["block"] = list(k.block)
    if k.launch_tid is not None:
        line["launch_tid"] = k.launch_tid
    if k.launch_ns is not None:
        line["launch_ns"] = k.launch_ns
    for key, sid in (("stack", k.stack_id), ("replay_stack", k.replay_stack_id)):
        if sid is None or mode == "nostack":
            continue
        if mode == "dedup":
            line[key + "_id"] = sid
        else:
            line[key] = [_frame(f) for f in tl.stacks.get(sid, ())]
    return line


def write_events(timeline: Timeline, path, mode: str = "dedup") -> None:
    """Write `timeline` to `path` as NDJSON kernel events (see the module doc)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    tl = timeline
    defined: set[int] = set()
    dump = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    with private_output(path, text=True) as out:
        out.write(dump(header(tl, mode)) + "\n")
        for k in tl.kernels:
            if mode == "dedup":
                for sid in (k.stack_id, k.replay_stack_id):
                    if sid is None or sid in defined:
                        continue
                    defined.add(sid)
                    # A stack the Timeline lacks is defined empty, so that every
                    # id a kernel names has its definition.
                    out.write(
                        dump(
                            {"type": "callstack_def", "id": sid, "frames": [_frame(f) for f in tl.stacks.get(sid, ())]}
                        )
                        + "\n"
                    )
            out.write(dump(kernel(tl, k, mode)) + "\n")
        for line in inkernel_lines(tl):
            out.write(dump(line) + "\n")
        for d in tl.drops:
            line = {"type": "drop", "what": d.what, "count": d.count}
            if d.pid is not None:
                line["pid"] = d.pid
            out.write(dump(line) + "\n")


def inkernel_lines(tl: Timeline):
    for n, ik in enumerate(tl.inkernel):
        k = tl.kernels[ik.kernel]
        yield {
            "type": "inkernel",
            "id": n,
            "kernel": ik.kernel,
            "pid": k.pid,
            "correlation_id": k.correlation_id,
            "source": ik.source,
            "placed_by": ik.placed_by,
            "clamped": ik.clamped,
        }
        for t in ik.tracks:
            yield {"type": "inkernel_track", "of": n, "id": t.id, "parent": t.parent, "name": t.name}
        for e in ik.events:
            yield {
                "type": "inkernel_event",
                "of": n,
                "track": e.track,
                "start_ns": e.start_ns,
                "end_ns": e.end_ns,
                "name": e.name,
                "args": [[a, v] for a, v in e.args],
            }


class EventsError(ValueError):
    """A file that is not NDJSON kernel events we can read, in one line."""


MAX_LINE = 1 << 20  # bytes of one line
MAX_LINES = 20_000_000
# bytes of the whole file: lines of 1 MiB each would be 20 TB (issue 44); a full
# default capture ring (250 000 kernels, their stacks and in-kernel events) is
# well under 1 GiB
MAX_BYTES = 4 << 30


def read_events(path) -> Timeline:
    """A file write_events wrote, as a Timeline (EventsError: what is wrong, where).
    Under sudo only a regular file the invoking user may read (system/safe_open.py)."""
    from ..probes.devices import GpuDevice

    tl: Timeline | None = None
    inline: dict[tuple, int] = {}  # "full" mode's stacks -> the ids given them
    inner = _InKernelReader()
    from ..system.safe_open import open_for_invoker

    try:
        fd, _ = open_for_invoker(str(path))
    except OSError as e:
        raise EventsError(str(e) if not e.strerror else f"{path}: {e.strerror}") from None
    f = os.fdopen(fd, "rb")
    with f:
        read = 0
        for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), 1):
            where = f"{path}:{n}"
            read += len(raw)
            if len(raw) > MAX_LINE or n > MAX_LINES or read > MAX_BYTES:
                raise EventsError(
                    f"{where}: a line longer than {MAX_LINE} bytes, more than {MAX_LINES} lines, "
                    f"or more than {MAX_BYTES} bytes"
                )
            try:
                line = json.loads(raw)
                kind = line["type"]
                if tl is None:
                    if kind != "header":
                        raise EventsError(f"{where}: no header line first: not a gpu-agent events file")
                    tl = Timeline(
                        host=str(line["host"]),
                        started_ns=int(line["started_ns"]),
                        ended_ns=int(line["ended_ns"]),
                        clock=str(line["clock"]),
                    )
                    tl.processes = {int(p["pid"]): str(p["comm"]) for p in line["pids"]}
                    tl.threads = {(int(t["pid"]), int(t["tid"])): str(t["name"]) for t in line["threads"]}
                    tl.devices = {
                        (int(d["pid"]), int(d["ordinal"])): GpuDevice(
                            int(d["ordinal"]), str(d["uuid"]), str(d["model"])
                        )
                        for d in line["devices"]
                    }
                    pair = line.get("monotonic_raw_pair")
                    tl.monotonic_raw_pair = (int(pair[0]), int(pair[1])) if pair else None
                elif kind == "callstack_def":
                    tl.stacks[int(line["id"])] = [_read_frame(x) for x in line["frames"]]
                elif kind == "kernel":
                    tl.kernels.append(_read_kernel(tl, line, inline))
                elif kind.startswith("inkernel"):
                    inner.read(tl, kind, line)
                elif kind == "drop":
                    tl.drops.append(
                        Drop(str(line["what"]), int(line["count"]), int(line["pid"]) if "pid" in line else None)
                    )
            except EventsError:
                raise
            except (ValueError, KeyError, TypeError, IndexError) as e:
                raise EventsError(f"{where}: not a gpu-agent event line ({type(e).__name__}: {e})"[:300]) from None
    if tl is None:
        raise EventsError(f"{path}: empty: not a gpu-agent events file")
    return tl


class _InKernelReader:
    """The inkernel lines, checked as they come: each track and event belongs to
    the inkernel line just before it, each event to one of its tracks."""

    def __init__(self):
        self.tracks: set[int] = set()
        self.events = 0

    def read(self, tl: Timeline, kind: str, x: dict) -> None:
        if kind == "inkernel":
            i, n = int(x["kernel"]), int(x["id"])
            if not 0 <= i < len(tl.kernels) or n != len(tl.inkernel):
                raise ValueError(f"inkernel {n} names kernel {i} of {len(tl.kernels)} before it")
            tl.inkernel.append(InKernel(i, str(x["source"]), str(x["placed_by"]), clamped=int(x["clamped"])))
            self.tracks = set()
            return
        if not tl.inkernel or int(x["of"]) != len(tl.inkernel) - 1:
            raise ValueError(f"{kind} of {x['of']}, not of the inkernel line before it")
        ik = tl.inkernel[-1]
        if kind == "inkernel_track":
            t = InKernelTrack(int(x["id"]), int(x["parent"]), str(x["name"]))
            if t.id in self.tracks or (t.parent and t.parent not in self.tracks):
                raise ValueError(f"track {t.id} (parent {t.parent}) repeated, or before its parent")
            self.tracks.add(t.id)
            ik.tracks.append(t)
        elif kind == "inkernel_event":
            args = [(str(a), v) for a, v in x["args"]]
            if not all(isinstance(v, (str, int, float)) for _, v in args):
                raise ValueError("an event argument that is not a string or a number")
            e = InKernelEvent(int(x["track"]), int(x["start_ns"]), int(x["end_ns"]), str(x["name"]), args)
            self.events += 1
            if e.track not in self.tracks or e.end_ns < e.start_ns or self.events > MAX_INKERNEL_EVENTS:
                raise ValueError(
                    f"event on track {e.track}, {e.start_ns}..{e.end_ns}: no such track, "
                    f"ends before it starts, or past {MAX_INKERNEL_EVENTS} events"
                )
            ik.events.append(e)


def _read_frame(x: dict) -> Frame:
    return Frame(str(x["name"]), str(x["kind"]), str(x["file"]), int(x["line"]))


def _read_kernel(tl: Timeline, x: dict, inline: dict) -> KernelEvent:
    k = KernelEvent(
        pid=int(x["pid"]),
        start_ns=int(x["start_ns"]),
        end_ns=int(x["end_ns"]),
        name=str(x["name"]),
        mangled=str(x["mangled"]),
        device=int(x["device"]),
        stream=int(x["stream"]),
        context=int(x["context"]),
        correlation_id=int(x["correlation_id"]),
        graph_id=int(x["graph_id"]),
        graph_node_id=int(x["graph_node_id"]),
        grid=tuple(map(int, x["grid"]))[:3] if "grid" in x else None,
        block=tuple(map(int, x["block"]))[:3] if "block" in x else None,
        launch_tid=int(x["launch_tid"]) if "launch_tid" in x else None,
        launch_ns=int(x["launch_ns"]) if "launch_ns" in x else None,
    )
    for key in ("stack", "replay_stack"):
        if key + "_id" in x:
            sid = int(x[key + "_id"])
        elif key in x:  # "full" mode: stacks inline, given ids here
            frames = [_read_frame(f) for f in x[key]]
            sid = inline.setdefault(tuple(frames), len(tl.stacks) + 1)
            tl.stacks.setdefault(sid, frames)
        else:
            continue
        setattr(k, "stack_id" if key == "stack" else "replay_stack_id", sid)
    return k
