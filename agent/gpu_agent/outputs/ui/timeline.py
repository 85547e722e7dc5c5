"""The Timeline tab's data: the kernels of one Perfetto trace from the store (written
by `record --store` or `trace --store`, timeline/perfetto_trace.py), as rows of
(process, GPU, stream), parsed once into compact arrays (Trace) and served in views:
a span of the capture either as its kernels (at most MAX_DETAIL) or, when it holds
more, as per-row buckets of busy time and kernel counts, the way Perfetto draws a
zoomed-out track. So the page draws the whole capture at every zoom (250 000
kernels: 40 bytes each here, and a few KB a view) and asks for the kernels of the
span it shows once they are few enough to draw one by one.

A store file is read as untrusted bytes (a `gpu-agent ui --profiles DIR` may serve a
directory other users write into, or a trace that a user's .nanotrace carried into
it): at most MAX_BYTES a file and MAX_PACKETS packets, and what it keeps is bounded
too: at most MAX_KERNELS kernels (the earliest; the rest are counted), MAX_TRACKS
track descriptors, MAX_NAMES interned names and MAX_INTERNED interned frames, their
names and callstacks, MAX_STACKS launch stacks (those past them are ignored, counted
and said on the page), MAX_DEPTH open slices a track and MAX_OPEN in all. A view is
bounded as well: MAX_DETAIL kernels or MAX_CELLS (row, bucket) cells. Anything this
reader cannot follow is one clear error, never an exception in the server; a trace
is parsed once (TraceCache keeps the last few, and the error of a bad one)."""

from __future__ import annotations

import re
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, OrderedDict
from dataclasses import dataclass
from itertools import accumulate
from operator import sub
from typing import Callable, NamedTuple, Optional, Union

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from google.protobuf.message import DecodeError

from ...timeline.kernel_fields import INKERNEL, frame_text
from ...timeline.model import Frame
from .wire import varint

MAX_BYTES = 64 << 20  # about 2 s of parsing here (37 MiB: 1.2 s)
# Packets parsed: 1-2 us each however small (issue 44: 6.8 M track descriptors in
# 63 MiB took 66-85 s), so at most about 5 s. The Perfetto writer's packets are about
# 60 bytes (200 000 kernels: 23.8 MB, 400 206 packets): a 64 MiB trace of its own
# holds about 1.1 M.
MAX_PACKETS = 2_500_000
# Kernels kept: a kernel is two packets, so MAX_PACKETS holds at most this many; in
# arrays about 40 bytes each (the largest capture of the default ring: 250 000).
MAX_KERNELS = MAX_PACKETS // 2
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


MAX_INTERNED = 200_000  # interned frames, function names, source paths and callstacks kept
MAX_STACKS = 50_000  # distinct launch stacks kept (the rest: counted, shown without)
MAX_FRAMES = 128  # frames of one stack kept (the outermost past it: cut)
MAX_STACK_FRAMES = 1_000_000  # frames over all kept stacks
MAX_FRAME_TEXT = 500  # characters of one frame's text
# A view: its kernels when the span holds at most MAX_DETAIL (about 35 bytes each in
# JSON), else buckets: at most MAX_BUCKETS a row, MAX_CELLS (row, bucket) in all
# (a trace of 100 000 one-kernel rows gets fewer buckets, not 400 M cells).
MAX_DETAIL = 20_000
MAX_BUCKETS = 4_096
MAX_CELLS = 100_000
MAX_SPAN_NS = 1 << 62  # a view's t0 and t1, relative to the first kernel


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
    i = count = 0
    size = len(data)
    view = memoryview(data)
    parse = pb.TracePacket.FromString
    while i < size:
        count += 1
        if count > MAX_PACKETS:
            raise TraceError(f"more than {MAX_PACKETS:,} packets, more than the page reads: download it")
        if data[i] != 0x0A:
            raise TraceError(f"not a Perfetto trace: byte {i} starts no packet")
        if i + 2 < size and data[i + 1] < 0x80:  # a length of one byte or two: nearly every packet
            n, i = data[i + 1], i + 2
        elif i + 3 < size and data[i + 2] < 0x80:
            n, i = (data[i + 1] & 0x7F) | data[i + 2] << 7, i + 3
        else:
            n, i = _varint(data, i + 1)
        if i + n > size:
            raise TraceError("not a Perfetto trace: its last packet is cut short")
        try:
            yield parse(view[i : i + n])
        except DecodeError as e:
            raise TraceError(f"not a Perfetto trace: packet at byte {i}: {e}") from None
        i += n


class _Sequence:
    """One packet sequence's interned data, dropped with its incremental state: event
    names, and the frames, function names, source paths and callstacks its launch
    stacks are made of (resolved: a callstack's stack index, once asked)."""

    __slots__ = ("names", "functions", "paths", "frames", "callstacks", "resolved")

    def __init__(self):
        self.names: dict[int, str] = {}
        self.functions: dict[int, str] = {}
        self.paths: dict[int, str] = {}
        self.frames: dict[int, tuple[int, int, int]] = {}  # iid -> (function, path, line)
        self.callstacks: dict[int, tuple] = {}  # iid -> frame iids, outermost first
        self.resolved: dict[int, int] = {}

    def stack_entries(self) -> int:
        return len(self.functions) + len(self.paths) + len(self.frames) + len(self.callstacks)


class _Stacks:
    """Launch stacks as text, leaf first (timeline/kernel_fields.stack_text's lines),
    each distinct one kept once: a kernel holds its index, or -1."""

    def __init__(self):
        self.stacks: list[tuple[str, ...]] = []
        self._index: dict[tuple, int] = {}
        self._texts: dict[str, str] = {}  # one string object per distinct frame text
        self.frames = 0
        self.ignored = 0

    def resolve(self, seq: _Sequence, iid: int) -> int:
        i = seq.resolved.get(iid)
        if i is None:
            ids = seq.callstacks.get(iid)
            i = seq.resolved[iid] = -1 if ids is None else self._add(seq, ids)
        return i

    def _add(self, seq: _Sequence, ids: tuple) -> int:
        lines = []
        for fid in reversed(ids[-MAX_FRAMES:]):  # leaf first; the outermost past MAX_FRAMES cut
            fn, path, line = seq.frames.get(fid, (0, 0, 0))
            text = frame_text(Frame(seq.functions.get(fn, "?"), "native", seq.paths.get(path, ""), line))
            text = text[:MAX_FRAME_TEXT]
            lines.append(self._texts.setdefault(text, text))
        key = tuple(lines)
        i = self._index.get(key)
        if i is None:
            if len(self.stacks) >= MAX_STACKS or self.frames + len(key) > MAX_STACK_FRAMES:
                self.ignored += 1
                return -1
            i = self._index[key] = len(self.stacks)
            self.stacks.append(key)
            self.frames += len(key)
        return i


def _offsets(keys: array, n: int) -> array:
    """Where each of the keys 0..n-1 starts in the keys sorted (n + 1 offsets)."""
    counts = Counter(keys)
    return array("q", accumulate((counts.get(k, 0) for k in range(n)), initial=0))


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class _Reader:
    """One pass over a trace's packets: the track descriptors, the interned data,
    and every slice that ends, kernels into flat arrays (a kernel is 4 numbers and
    its name and stack index, never an object of its own)."""

    def __init__(self, max_kernels: int):
        self.max_kernels = max_kernels
        self.tracks: dict[int, _Track] = {}
        self.seqs: dict[int, _Sequence] = {}
        self.n_names = self.n_interned = 0  # over all sequences
        self.stacks = _Stacks()
        self.open: dict[int, list] = {}  # track -> its open slices (a track without any has no entry)
        self.n_open = 0
        self.name_of: dict[str, int] = {}
        self.k_start, self.k_end = array("q"), array("q")
        self.k_track = array("Q")
        self.k_name, self.k_stack = array("i"), array("i")
        self.inner: list[tuple] = []  # (start, end, track, name)
        self.total = self.inner_total = 0
        self.ignored_tracks = self.ignored_names = self.ignored_interned = 0

    def read(self, data: bytes) -> None:
        """Every packet; a kernel's begin and end inline, with local names: they are
        nearly all of a trace's packets (250 000 kernels: 500 000 packets)."""
        begin, end = pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END
        cleared = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        open_, tracks, seqs, name_of = self.open, self.tracks, self.seqs, self.name_of
        add_start, add_end, add_track = self.k_start.append, self.k_end.append, self.k_track.append
        add_name, add_stack = self.k_name.append, self.k_stack.append
        resolve = self.stacks.resolve
        for p in _packets(data):
            if p.sequence_flags & cleared:
                gone = seqs.pop(p.trusted_packet_sequence_id, None)
                if gone is not None:
                    self.n_names -= len(gone.names)
                    self.n_interned -= gone.stack_entries()
            if p.HasField("interned_data"):
                self._interned(p.trusted_packet_sequence_id, p.interned_data)
            kind = p.WhichOneof("data")
            if kind != "track_event":
                if kind == "track_descriptor":
                    self._descriptor(p.track_descriptor)
                continue
            e = p.track_event
            t = e.type
            if t == end:  # first: as many as begins, and fewer fields read
                uuid = e.track_uuid
                stack = open_.get(uuid)
                if not stack:
                    continue
                start, name, launch = stack.pop()
                self.n_open -= 1
                if not stack:
                    del open_[uuid]
                track = tracks.get(uuid)
                if track is None or not track.parent:
                    continue  # not on a stream track (under a GPU track): not a kernel
                ts = p.timestamp
                if ts < start:
                    ts = start
                if track.inkernel:
                    self.inner_total += 1
                    if len(self.inner) < MAX_INKERNEL:
                        self.inner.append((start, ts, uuid, name))
                    continue
                self.total += 1
                if self.total <= self.max_kernels:
                    add_start(start)
                    add_end(ts)
                    add_track(uuid)
                    n = name_of.get(name)
                    if n is None:
                        n = name_of[name] = len(name_of)
                    add_name(n)
                    add_stack(launch)
            elif t == begin:
                uuid = e.track_uuid
                stack = open_.get(uuid)
                if stack is None:
                    stack = open_[uuid] = []
                elif len(stack) >= MAX_DEPTH:
                    raise TraceError(f"more than {MAX_DEPTH} open slices on one track")
                if self.n_open >= MAX_OPEN:
                    raise TraceError(f"more than {MAX_OPEN:,} slices open at once")
                sq = seqs.get(p.trusted_packet_sequence_id)
                name = e.name or (sq.names.get(e.name_iid, "?") if sq else "?")
                iid = e.callstack_iid
                stack.append((p.timestamp, name, resolve(sq, iid) if iid and sq is not None else -1))
                self.n_open += 1

    def _sequence(self, seq: int) -> Optional[_Sequence]:
        s = self.seqs.get(seq)
        if s is None and len(self.seqs) < MAX_SEQUENCES:
            s = self.seqs[seq] = _Sequence()
        return s

    def _interned(self, seq: int, d) -> None:
        s = self._sequence(seq)
        for e in d.event_names:
            if s is None or (self.n_names >= MAX_NAMES and e.iid not in s.names):
                self.ignored_names += 1
                continue
            self.n_names += e.iid not in s.names
            s.names[e.iid] = e.name
        if not (d.function_names or d.source_paths or d.frames or d.callstacks):
            return
        entries = (
            [(s.functions if s else None, e.iid, _text(e.str)) for e in d.function_names]
            + [(s.paths if s else None, e.iid, _text(e.str)) for e in d.source_paths]
            + [
                (s.frames if s else None, e.iid, (e.function_name_id, e.source_path_iid, e.line_number))
                for e in d.frames
            ]
            + [(s.callstacks if s else None, e.iid, tuple(e.frame_ids)) for e in d.callstacks]
        )
        for table, iid, value in entries:
            if table is None or (self.n_interned >= MAX_INTERNED and iid not in table):
                self.ignored_interned += 1
                continue
            self.n_interned += iid not in table
            table[iid] = value

    def _descriptor(self, d) -> None:
        if d.uuid in self.tracks or len(self.tracks) < MAX_TRACKS:
            process = f"{d.process.process_name or 'pid'} ({d.process.pid})" if d.HasField("process") else None
            self.tracks[d.uuid] = _Track(
                d.parent_uuid, d.name, process, d.description.startswith(INKERNEL), d.sibling_order_rank
            )
        else:
            self.ignored_tracks += 1


@dataclass(frozen=True)
class Trace:
    """One parsed trace, kept by TraceCache and read by views. Its kernels sorted by
    (row, start), times relative to the first kernel's start (start_ns), in arrays:
    a row's kernels are row_lo[r]:row_lo[r + 1]; cum[i] is the summed duration of
    the kernels before i (a row's busy time up to t is a difference of two), and
    reach[i] the latest end of its row's kernels up to i (the first one that may
    reach into a span is a bisection, even where slices overlap). by_name lists the
    kernels by (name, row, start), a name's from name_lo[n] to name_lo[n + 1]: the
    marked kernel's places without a pass over all."""

    file: str
    start_ns: int
    end_ns: int  # the last kernel end, absolute as start_ns
    rows: list[str]
    depth: list[int]
    parent: list[int]
    names: list[str]
    row_lo: array
    start: array
    end: array
    cum: array
    reach: array
    row: array
    name: array
    stack: array
    by_name: array
    name_lo: array
    kernel_rows: list[int]  # the rows that hold kernels (not in-kernel rows)
    name_index: dict[str, int]
    stacks: list[tuple[str, ...]]
    total: int
    inkernel: list[list[int]]
    inkernel_total: int
    ignored: str

    def __len__(self) -> int:
        return len(self.start)

    def meta(self) -> dict:
        """What the page keeps of a trace: its rows, names (and each one's count),
        span, what was cut, and the in-kernel events (few: drawn from here)."""
        n = len(self)
        return {
            "file": self.file,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "span_ns": self.end_ns - self.start_ns,  # exact: a page's numbers hold 53 bits, not start_ns
            "rows": self.rows,
            "depth": self.depth,
            "parent": self.parent,
            "names": self.names,
            "counts": [self.name_lo[i + 1] - self.name_lo[i] for i in range(len(self.names))],
            "kernels": n,
            "total": self.total,
            "truncated": self.total > n,
            "stacks": len(self.stacks),
            "inkernel": self.inkernel,
            "inkernel_total": self.inkernel_total,
            "ignored": self.ignored,
            "max_detail": MAX_DETAIL,
        }

    def view(self, t0: int, t1: int, buckets: int, mark: str = "") -> dict:
        """The span [t0, t1) (ns from start_ns): its kernels [row, start, duration,
        name, stack or -1] when there are at most MAX_DETAIL, else `buckets` equal
        buckets (fewer past MAX_CELLS) and for each row that has kernels in it
        [row, [bucket], [busy per mille], [kernels starting], [of them named mark]],
        buckets where nothing runs left out."""
        if not 0 < buckets <= MAX_BUCKETS or t1 <= t0:
            raise ValueError("a view needs t0 < t1 and 1..MAX_BUCKETS buckets")
        spans = []  # (row, first, past): the kernels of a row that may overlap the span
        for r in self.kernel_rows:
            lo, hi = self.row_lo[r], self.row_lo[r + 1]
            a = bisect_right(self.reach, t0, lo, hi)
            b = bisect_left(self.start, t1, a, hi)
            if a < b:
                spans.append((r, a, b))
        count = sum(b - a for _, a, b in spans)
        out = {"t0": t0, "t1": t1, "mark": mark, "count": count}
        if count <= MAX_DETAIL:
            start, end, name, stack = self.start, self.end, self.name, self.stack
            out["kernels"] = [
                [r, start[i], end[i] - start[i], name[i], stack[i]]
                for r, a, b in spans
                for i in range(a, b)
                if end[i] > t0 or start[i] >= t0
            ]
            out["count"] = len(out["kernels"])
            return out
        nb = max(1, min(buckets, MAX_CELLS // len(spans), t1 - t0))
        bounds = [t0 + (t1 - t0) * i // nb for i in range(nb + 1)]
        m = self.name_index.get(mark, -1) if mark else -1
        rows, marked = [], 0
        for r, a, b in spans:
            busy, starts = self._busy(r, a, b, bounds)  # busy < 0: overlapping slices of another writer
            lit = self._marks(m, r, bounds) if m >= 0 else [0] * nb
            marked += sum(lit)
            cells = [i for i in range(nb) if busy[i] > 0 or starts[i] or lit[i]]
            rows.append(
                [
                    r,
                    cells,
                    [max(0, min(1000, round(1000 * busy[i] / (bounds[i + 1] - bounds[i])))) for i in cells],
                    [starts[i] for i in cells],
                    [lit[i] for i in cells],
                ]
            )
        out.update(buckets=nb, rows=rows, marked=marked)
        return out

    def _busy(self, r: int, a: int, b: int, bounds: list[int]) -> tuple[list, list]:
        """Each bucket's busy ns on row r and the kernels that start in it. Few
        kernels: each adds its overlap (whole buckets through a running sum); many:
        a bisection per bucket edge, busy time being the difference of cum."""
        nb = len(bounds) - 1
        t0, t1 = bounds[0], bounds[-1]
        start, end, cum = self.start, self.end, self.cum
        if b - a <= nb:
            busy, starts, whole = [0] * nb, [0] * nb, [0] * (nb + 1)
            for i in range(a, b):
                s, e = max(start[i], t0), min(end[i], t1)
                if start[i] >= t0:
                    starts[bisect_right(bounds, s, 0, nb) - 1] += 1
                if e <= s:
                    continue
                b0, b1 = bisect_right(bounds, s, 0, nb) - 1, bisect_left(bounds, e, 1, nb + 1) - 1
                if b0 == b1:
                    busy[b0] += e - s
                    continue
                busy[b0] += bounds[b0 + 1] - s
                busy[b1] += e - bounds[b1]
                whole[b0 + 1] += 1
                whole[b1] -= 1
            running = 0
            for i in range(nb):
                running += whole[i]
                if running:
                    busy[i] += running * (bounds[i + 1] - bounds[i])
            return busy, starts
        lo, hi = self.row_lo[r], self.row_lo[r + 1]
        at, j = [], lo  # busy ns of the row up to each bucket edge
        edges = []
        for t in bounds:
            j = bisect_left(start, t, j, hi)
            edges.append(j)
            k = j - 1
            at.append(cum[lo] if k < lo else cum[k] + min(t - start[k], end[k] - start[k]))
        return [at[i + 1] - at[i] for i in range(nb)], [edges[i + 1] - edges[i] for i in range(nb)]

    def _marks(self, m: int, r: int, bounds: list[int]) -> list[int]:
        """How many kernels named names[m] start in each bucket of row r."""
        nb = len(bounds) - 1
        by, lo, hi = self.by_name, self.name_lo[m], self.name_lo[m + 1]
        lo = bisect_left(by, r, lo, hi, key=self.row.__getitem__)
        hi = bisect_right(by, r, lo, hi, key=self.row.__getitem__)
        key = self.start.__getitem__
        a = bisect_left(by, bounds[0], lo, hi, key=key)
        b = bisect_left(by, bounds[-1], a, hi, key=key)
        lit = [0] * nb
        if b - a <= nb:
            for i in range(a, b):
                lit[bisect_right(bounds, key(by[i]), 0, nb) - 1] += 1
            return lit
        edges = [bisect_left(by, t, a, b, key=key) for t in bounds]
        return [edges[i + 1] - edges[i] for i in range(nb)]

    def launch_stack(self, index: int) -> list[str]:
        if not 0 <= index < len(self.stacks):
            raise IndexError(index)
        return list(self.stacks[index])


def parse_trace(data: bytes, file: str = "", max_kernels: int = MAX_KERNELS) -> Trace:
    """The Trace of a Perfetto trace's bytes: the kernel slices (those on stream
    tracks: every slice with a GPU track above it) with their launch stacks, and a
    merged .nanotrace's in-kernel slices, whose tracks (CTAs, warps) follow their
    stream's row, one level deeper each."""
    if len(data) > MAX_BYTES:
        raise TraceError(
            f"the trace is {len(data) >> 20} MiB, more than the page reads "
            f"({MAX_BYTES >> 20} MiB): download it for ui.perfetto.dev"
        )
    rd = _Reader(max_kernels)
    rd.read(data)
    tracks, n = rd.tracks, len(rd.k_start)
    t0 = min(rd.k_start) if n else 0
    streams = sorted(set(rd.k_track), key=lambda t: _natural(_row_name(tracks, t)))  # stream 7 before 13
    rows, depth, parent = _rows(tracks, streams, {t for _, _, t, _ in rd.inner})
    row_of = {t: i for i, t in enumerate(rows)}
    k_row = array("i", (row_of[t] for t in rd.k_track))
    order = sorted(range(n), key=rd.k_start.__getitem__)
    order.sort(key=k_row.__getitem__)  # stable: by row, then start
    start = array("q", (rd.k_start[i] - t0 for i in order))
    end = array("q", (rd.k_end[i] - t0 for i in order))
    row = array("i", (k_row[i] for i in order))
    name = array("i", (rd.k_name[i] for i in order))
    stack = array("i", (rd.k_stack[i] for i in order))
    del order, k_row
    row_lo = _offsets(row, len(rows))
    cum = array("q", accumulate(map(sub, end, start), initial=0))
    reach = array("q")
    for r in range(len(rows)):
        reach.extend(accumulate(end[row_lo[r] : row_lo[r + 1]], max))
    name_of = dict(rd.name_of)
    for *_, nm in rd.inner:
        name_of.setdefault(nm, len(name_of))
    names = list(name_of)
    by_name = array("i", sorted(range(n), key=name.__getitem__))  # stable: by (row, start) in a name
    inner = [[row_of[t], s - t0, e - s, name_of[nm]] for s, e, t, nm in sorted(rd.inner) if t in row_of]
    return Trace(
        file=file,
        start_ns=t0,
        end_ns=t0 + max(end, default=0),
        rows=[_row_name(tracks, t) if not depth[i] else tracks[t].name for i, t in enumerate(rows)],
        depth=depth,
        parent=parent,
        names=names,
        row_lo=row_lo,
        start=start,
        end=end,
        cum=cum,
        reach=reach,
        row=row,
        name=name,
        stack=stack,
        by_name=by_name,
        name_lo=_offsets(name, len(names)),
        kernel_rows=[r for r in range(len(rows)) if row_lo[r] < row_lo[r + 1]],
        name_index=name_of,
        stacks=rd.stacks.stacks,
        total=rd.total,
        inkernel=inner,
        inkernel_total=rd.inner_total,
        ignored=_ignored(rd.ignored_tracks, rd.ignored_names, rd.ignored_interned, rd.stacks.ignored),
    )


class TraceCache:
    """The last few parsed traces (and the errors of those that could not be), keyed
    by the file's identity (device, inode, size, mtime): a page's views of one trace
    parse it once (250 000 kernels: about 2 s), a trace rewritten or replaced is
    parsed again. Bounded by traces and by their kernels together (about 40 bytes
    each); the least recently used goes first. One parse at a time: two requests for
    one trace wait for the same parse, a hostile file costs one."""

    def __init__(self, max_traces: int = 4, max_kernels: int = MAX_KERNELS):
        self.max_traces, self.max_kernels = max_traces, max_kernels
        self._lock = threading.Lock()  # the entries
        self._parse = threading.Lock()
        self._entries: OrderedDict[tuple, Union[Trace, TraceError]] = OrderedDict()

    def get(self, key: tuple, load: Callable[[], Trace]) -> Trace:
        """The trace of key, parsed by load() unless cached; its TraceError raised."""
        hit = self._lookup(key)
        if hit is None:
            with self._parse:
                hit = self._lookup(key)
                if hit is None:
                    try:
                        hit = load()
                    except TraceError as e:
                        hit = e
                    self._put(key, hit)
        if isinstance(hit, TraceError):
            raise hit
        return hit

    def _lookup(self, key: tuple):
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def _put(self, key: tuple, value) -> None:
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self.max_traces or (
                len(self._entries) > 1
                and sum(len(v) for v in self._entries.values() if isinstance(v, Trace)) > self.max_kernels
            ):
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def _ignored(tracks: int, names: int, interned: int = 0, stacks: int = 0) -> str:
    """What the page says it left out of the trace, or ""."""
    parts = [f"{tracks:,} track descriptors past {MAX_TRACKS:,}"] if tracks else []
    parts += [f"{names:,} event names past {MAX_NAMES:,}"] if names else []
    parts += [f"{interned:,} interned frames and callstacks past {MAX_INTERNED:,}"] if interned else []
    parts += [f"{stacks:,} launch stacks past {MAX_STACKS:,} ({MAX_STACK_FRAMES:,} frames)"] if stacks else []
    return " and ".join(parts) + " ignored (their slices or stacks are not shown)" if parts else ""


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
