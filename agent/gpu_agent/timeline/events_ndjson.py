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
- one "drop" per Timeline drop, last (drops are totals of the capture).

Modes: "dedup" (the default) refers to stacks by id (stack_id,
replay_stack_id); "full" writes each kernel's frames inline (stack,
replay_stack), for tools that read one line at a time; "nostack" writes no
stacks at all, the smallest file.

Each line is written as it is made: memory grows with the distinct stacks,
not with the kernels."""

from __future__ import annotations

import json

from ..system.atomic import private_output
from .model import SCHEMA_VERSION, Frame, KernelEvent, Timeline

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
        "threads": [{"pid": pid, "tid": tid, "name": name}
                    for (pid, tid), name in sorted(tl.threads.items())],
        "devices": [{"pid": pid, "ordinal": d.ordinal, "uuid": d.uuid, "model": d.model}
                    for (pid, _), d in sorted(tl.devices.items())],
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
                    out.write(dump({"type": "callstack_def", "id": sid,
                                    "frames": [_frame(f) for f in tl.stacks.get(sid, ())]}) + "\n")
            out.write(dump(kernel(tl, k, mode)) + "\n")
        for d in tl.drops:
            line = {"type": "drop", "what": d.what, "count": d.count}
            if d.pid is not None:
                line["pid"] = d.pid
            out.write(dump(line) + "\n")
