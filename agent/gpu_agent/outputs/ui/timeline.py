"""The Timeline tab's data: the kernels of one Perfetto trace from the store (written
by `record --store` or `trace --store`, reporters/perfetto_trace.py), as rows of
(process, GPU, stream) and slices the page draws on a canvas.

A store file is read as untrusted bytes (a `gpu-agent ui --profiles DIR` may serve a
directory other users write into, or a trace that a user's .nanotrace carried into
it): at most MAX_BYTES a file and MAX_PACKETS packets, and what it keeps is bounded
too: at most MAX_KERNELS kernels sent (the earliest; the rest are counted), MAX_TRACKS
track descriptors and MAX_NAMES interned names (those past them are ignored, counted
and said on the page), MAX_DEPTH open slices a track and MAX_OPEN in all. Anything
this reader cannot follow is one clear error, never an exception in the server."""

from __future__ import annotations

import re
from typing import NamedTuple, Optional

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from google.protobuf.message import DecodeError

from ...timeline.kernel_fields import INKERNEL
from .wire import varint

MAX_BYTES = 64 << 20  # about 2 s of parsing here (37 MiB: 1.2 s)
# Packets parsed: 1-2 us each however small (issue 44: 6.8 M track descriptors in
# 63 MiB took 66-85 s), so at most about 5 s. The Perfetto writer's packets are about
# 60 bytes (200 000 kernels: 23.8 MB, 400 206 packets): a 64 MiB trace of its own
# holds about 1.1 M.
MAX_PACKETS = 2_500_000
MAX_KERNELS = 50_000
MAX_DEPTH = 64  # open slices on one track; levels of in-kernel tracks
MAX_OPEN = 100_000  # open slices on all tracks (kernels run at once, and their in-kernel slices)
MAX_INKERNEL = 200_000  # in-kernel events sent
MAX_INKERNEL_ROWS = 4_096  # in-kernel tracks drawn (their events beyond: not sent)
# Track descriptors kept, each as a small tuple (~200 bytes; the protobuf object was
# 1.3 KiB: 6.8 M of them took the UI to 8.9 GB). A trace of the agent's has a few per
# process, GPU and stream, and the in-kernel tracks of its merged .nanotrace files
# (the page draws 4 096 of those). Past it descriptors are ignored, counted.
MAX_TRACKS = 100_000
MAX_NAMES = 200_000  # interned event names kept, over all sequences (the rest: counted, "?")
MAX_SEQUENCES = 10_000  # packet sequences whose names are kept


class _Track(NamedTuple):
    parent: int
    name: str
    process: Optional[str]  # "python (4242)" for a process track
    inkernel: bool
    rank: int


class TraceError(ValueError):
    pass


def _row_name(tracks: dict, uuid: int) -> str:
    """ "python (4242) · GPU 0 · stream 7": the track and its parents."""
    parts = []
    for _ in range(4):
        d = tracks.get(uuid)
        if d is None:
            break
        if d.process is not None:
            parts.append(d.process)
        elif d.name:  # "GPU 0: NVIDIA H100 80GB HBM3 (GPU-…)" -> "GPU 0": the row says where, briefly
            parts.append(d.name.split(":")[0] if d.name.startswith("GPU") else d.name)
        if not d.parent:
            break
        uuid = d.parent
    return " · ".join(reversed(parts)) or f"track {uuid:x}"


def _natural(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    return varint(data, i, TraceError, "not a Perfetto trace: a length runs past the end")


def _packets(data: bytes):
    """The Trace message's packets one at a time (field 1, length-delimited): memory
    holds one packet, not the whole trace's objects (739 MiB for a 37 MiB file); at
    most MAX_PACKETS of them."""
    i = count = 0  # count: packets; n: one packet's length
    view = memoryview(data)
    while i < len(data):
        count += 1
        if count > MAX_PACKETS:
            raise TraceError(f"more than {MAX_PACKETS:,} packets, more than the page reads: download it")
        if data[i] != 0x0A:
            raise TraceError(f"not a Perfetto trace: byte {i} starts no packet")
        n, i = _varint(data, i + 1)
        if i + n > len(data):
            raise TraceError("not a Perfetto trace: its last packet is cut short")
        try:
            yield pb.TracePacket.FromString(view[i : i + n])
        except DecodeError as e:
            raise TraceError(f"not a Perfetto trace: packet at byte {i}: {e}") from None
        i += n


def read_kernels(data: bytes, max_kernels: int = MAX_KERNELS) -> dict:
    """{start_ns, end_ns, rows: [name], depth: [int], parent: [row or -1], names:
    [name], kernels: [[row, start from start_ns, duration, name index]], total,
    truncated, inkernel: [[row, start, duration, name index]], inkernel_total} of the
    trace's kernel slices (those on stream tracks: every slice with a GPU track above
    it) and of a merged .nanotrace's in-kernel slices, whose tracks (CTAs, warps)
    follow their stream's row, one level deeper each."""
    if len(data) > MAX_BYTES:
        raise TraceError(
            f"the trace is {len(data) >> 20} MiB, more than the page reads "
            f"({MAX_BYTES >> 20} MiB): download it for ui.perfetto.dev"
        )
    tracks: dict[int, _Track] = {}
    names: dict[int, dict[int, str]] = {}  # sequence -> event name iid -> name
    n_names = 0  # in all the tables
    open_: dict[int, list] = {}  # track -> its open slices (a track without any has no entry)
    n_open = 0
    found, inner = [], []  # (start, end, track, name)
    total = inner_total = 0
    ignored_tracks = ignored_names = 0
    for p in _packets(data):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            n_names -= len(names.pop(seq, ()))
        if p.HasField("interned_data") and p.interned_data.event_names:
            table = names.get(seq)
            if table is None and len(names) < MAX_SEQUENCES:
                table = names[seq] = {}
            for e in p.interned_data.event_names:
                if table is None or (n_names >= MAX_NAMES and e.iid not in table):
                    ignored_names += 1
                    continue
                n_names += e.iid not in table
                table[e.iid] = e.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.uuid in tracks or len(tracks) < MAX_TRACKS:
                process = f"{d.process.process_name or 'pid'} ({d.process.pid})" if d.HasField("process") else None
                tracks[d.uuid] = _Track(
                    d.parent_uuid, d.name, process, d.description.startswith(INKERNEL), d.sibling_order_rank
                )
            else:
                ignored_tracks += 1
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack = open_.setdefault(e.track_uuid, [])
            if len(stack) >= MAX_DEPTH:
                raise TraceError(f"more than {MAX_DEPTH} open slices on one track")
            if n_open >= MAX_OPEN:
                raise TraceError(f"more than {MAX_OPEN:,} slices open at once")
            stack.append((p.timestamp, e.name or names.get(seq, {}).get(e.name_iid, "?")))
            n_open += 1
        elif e.type == pb.TrackEvent.TYPE_SLICE_END and open_.get(e.track_uuid):
            stack = open_[e.track_uuid]
            start, name = stack.pop()
            n_open -= 1
            if not stack:
                del open_[e.track_uuid]
            track = tracks.get(e.track_uuid)
            if track is None or not track.parent:
                continue  # not on a stream track (under a GPU track): not a kernel
            if track.inkernel:
                inner_total += 1
                if len(inner) < MAX_INKERNEL:
                    inner.append((start, max(p.timestamp, start), e.track_uuid, name))
                continue
            total += 1
            if len(found) < max_kernels:
                found.append((start, max(p.timestamp, start), e.track_uuid, name))
    kernels = sorted(found)
    t0 = kernels[0][0] if kernels else 0
    streams = sorted({k[2] for k in kernels}, key=lambda t: _natural(_row_name(tracks, t)))  # stream 7 before 13
    rows, depth, parent = _rows(tracks, streams, {t for _, _, t, _ in inner})
    row_of = {t: i for i, t in enumerate(rows)}
    name_of: dict[str, int] = {}
    out = [[row_of[t], s - t0, e - s, name_of.setdefault(n, len(name_of))] for s, e, t, n in kernels]
    ins = [
        [row_of[t], s - t0, e - s, name_of.setdefault(n, len(name_of))] for s, e, t, n in sorted(inner) if t in row_of
    ]
    return {
        "start_ns": t0,
        "end_ns": max((e for _, e, _, _ in kernels), default=0),
        "rows": [_row_name(tracks, t) if not depth[i] else tracks[t].name for i, t in enumerate(rows)],
        "depth": depth,
        "parent": parent,
        "names": list(name_of),
        "kernels": out,
        "total": total,
        "truncated": total > len(out),
        "inkernel": ins,
        "inkernel_total": inner_total,
        "ignored": _ignored(ignored_tracks, ignored_names),
    }


def _ignored(tracks: int, names: int) -> str:
    """What the page says it left out of the trace, or ""."""
    parts = [f"{tracks:,} track descriptors past {MAX_TRACKS:,}"] if tracks else []
    parts += [f"{names:,} event names past {MAX_NAMES:,}"] if names else []
    return " and ".join(parts) + " ignored (their slices are not shown)" if parts else ""


def _rows(tracks: dict, streams: list, used: set) -> tuple[list, list, list]:
    """Each stream's row, then the in-kernel tracks below it that hold events (and
    their parents), depth first in their sibling order; at most MAX_INKERNEL_ROWS."""
    children: dict[int, list] = {}
    keep = set()
    for t in used:  # a track with events and every in-kernel track above it
        for _ in range(MAX_DEPTH):
            d = tracks.get(t)
            if d is None or not d.inkernel or t in keep:
                break
            keep.add(t)
            t = d.parent
    for t in keep:
        children.setdefault(tracks[t].parent, []).append(t)
    rows, depth, parent = [], [], []
    for s in streams:
        todo = [(s, 0, -1)]
        while todo:
            t, lvl, up = todo.pop()
            if lvl and len(rows) - len(streams) >= MAX_INKERNEL_ROWS:
                continue
            rows.append(t), depth.append(lvl), parent.append(up)
            me = len(rows) - 1
            kids = sorted(children.get(t, []), key=lambda c: (tracks[c].rank, _natural(tracks[c].name)))
            todo += [(c, lvl + 1, me) for c in reversed(kids)]
    return rows, depth, parent
