"""The Timeline tab's data: the kernels of one Perfetto trace from the store (written
by `record --store` or `trace --store`, reporters/perfetto_trace.py), as rows of
(process, GPU, stream) and slices the page draws on a canvas.

A store file is read as untrusted bytes (a `gpu-agent ui --profiles DIR` may serve a
directory other users write into): at most MAX_BYTES a file, at most MAX_KERNELS
kernels sent (the earliest; the rest are counted), and anything this reader cannot
follow is one clear error, never an exception in the server."""

from __future__ import annotations

import re

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from google.protobuf.message import DecodeError

from ...timeline.kernel_fields import INKERNEL

MAX_BYTES = 64 << 20  # about 2 s of parsing here (37 MiB: 1.2 s); memory is that of MAX_KERNELS
MAX_KERNELS = 50_000
MAX_DEPTH = 64  # open slices on one track; levels of in-kernel tracks
MAX_INKERNEL = 200_000  # in-kernel events sent
MAX_INKERNEL_ROWS = 4_096  # in-kernel tracks drawn (their events beyond: not sent)


class TraceError(ValueError):
    pass


def _row_name(tracks: dict, uuid: int) -> str:
    """ "python (4242) · GPU 0 · stream 7": the track and its parents."""
    parts = []
    for _ in range(4):
        d = tracks.get(uuid)
        if d is None:
            break
        if d.HasField("process"):
            parts.append(f"{d.process.process_name or 'pid'} ({d.process.pid})")
        elif d.name:  # "GPU 0: NVIDIA H100 80GB HBM3 (GPU-…)" -> "GPU 0": the row says where, briefly
            parts.append(d.name.split(":")[0] if d.name.startswith("GPU") else d.name)
        if not d.parent_uuid:
            break
        uuid = d.parent_uuid
    return " · ".join(reversed(parts)) or f"track {uuid:x}"


def _natural(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while i < len(data) and shift < 64:
        b = data[i]
        v |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return v, i
        shift += 7
    raise TraceError("not a Perfetto trace: a length runs past the end")


def _packets(data: bytes):
    """The Trace message's packets one at a time (field 1, length-delimited): memory
    holds one packet, not the whole trace's objects (739 MiB for a 37 MiB file)."""
    i = 0
    view = memoryview(data)
    while i < len(data):
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
    tracks: dict[int, pb.TrackDescriptor] = {}
    names: dict[int, dict[int, str]] = {}  # sequence -> event name iid -> name
    open_: dict[int, list] = {}
    found, inner = [], []  # (start, end, track, name)
    total = inner_total = 0
    for p in _packets(data):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            names[seq] = {}
        if p.HasField("interned_data"):
            table = names.setdefault(seq, {})
            for e in p.interned_data.event_names:
                table[e.iid] = e.name
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack = open_.setdefault(e.track_uuid, [])
            if len(stack) >= MAX_DEPTH:
                raise TraceError(f"more than {MAX_DEPTH} open slices on one track")
            stack.append((p.timestamp, e.name or names.get(seq, {}).get(e.name_iid, "?")))
        elif e.type == pb.TrackEvent.TYPE_SLICE_END and open_.get(e.track_uuid):
            start, name = open_[e.track_uuid].pop()
            track = tracks.get(e.track_uuid)
            if track is None or not track.parent_uuid:
                continue  # not on a stream track (under a GPU track): not a kernel
            if track.description.startswith(INKERNEL):
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
    }


def _rows(tracks: dict, streams: list, used: set) -> tuple[list, list, list]:
    """Each stream's row, then the in-kernel tracks below it that hold events (and
    their parents), depth first in their sibling order; at most MAX_INKERNEL_ROWS."""
    children: dict[int, list] = {}
    keep = set()
    for t in used:  # a track with events and every in-kernel track above it
        for _ in range(MAX_DEPTH):
            d = tracks.get(t)
            if d is None or not d.description.startswith(INKERNEL) or t in keep:
                break
            keep.add(t)
            t = d.parent_uuid
    for t in keep:
        children.setdefault(tracks[t].parent_uuid, []).append(t)
    rows, depth, parent = [], [], []
    for s in streams:
        todo = [(s, 0, -1)]
        while todo:
            t, lvl, up = todo.pop()
            if lvl and len(rows) - len(streams) >= MAX_INKERNEL_ROWS:
                continue
            rows.append(t), depth.append(lvl), parent.append(up)
            me = len(rows) - 1
            kids = sorted(children.get(t, []), key=lambda c: (tracks[c].sibling_order_rank, _natural(tracks[c].name)))
            todo += [(c, lvl + 1, me) for c in reversed(kids)]
    return rows, depth, parent
