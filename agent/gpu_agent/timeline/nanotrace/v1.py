"""Version 1, cutedsl-trace's: one kernel, u32 ns offsets from its start, no
absolute time (its viewer's visualizer/parser.js at b-albar/cutedsl-trace 5db9688
reads it so). Read only."""

from __future__ import annotations

import re
import struct
from array import array

from .model import (
    COST_ARG,
    COST_EVENT,
    COST_RECORD,
    COST_TRACK,
    DEFAULT_MEMORY,
    GENERIC,
    KERNEL,
    MAX_BODY,
    MAX_ARGS,
    MAX_EVENTS,
    MAX_TRACKS,
    THREAD_BLOCK,
    V1_MAGIC,
    WARP,
    Event,
    Nanotrace,
    NanotraceError,
    Track,
    inflate,
    SLICE,
    Reader,
    Budget,
    Stream,
)

KEYS = tuple(str(k) for k in range(256))  # a parameter's name is its place (at most 255 of an event)
_PLACE = re.compile(r"\{(blockLinear|blockX|blockY|blockZ|lane|\d+)\}")
SHARED = 1 << 16  # names and argument tuples kept for sharing, at most (a lane's; the file's)
FILLED = 10  # bytes a placeholder may become (a u32 in decimal): what _scan charges for it


def fill(template: str, block: tuple, grid: tuple, lane: int, params: tuple) -> str:
    """A label as cutedsl-trace's viewer shows it (its parser.js formatLabel): {blockLinear},
    {blockX}, {blockY}, {blockZ} and {lane} from the event's CTA and lane, {N} the N-th
    parameter (left as it is where there is none)."""
    gx, gy = max(grid[0], 1), max(grid[1], 1)
    block_id = block[0]
    named = {
        "blockLinear": block_id,
        "blockX": block_id % gx,
        "blockY": block_id // gx % gy,
        "blockZ": block_id // (gx * gy),
        "lane": lane,
    }

    def one(m: re.Match) -> str:
        key = m.group(1)
        if key in named:
            return str(named[key])
        i = int(key)
        return str(params[i]) if i < len(params) else m.group(0)

    return _PLACE.sub(one, template) if "{" in template else template


_H, _HEAD, _TRACK, _COUNT, _EVENT = (struct.Struct(f) for f in ("<H", "<IIIQ", "<IHI", "<I", "<IIH"))
_PARAMS = tuple(struct.Struct(f"<{k}I") for k in range(256))  # an event's k parameters


def _scan(s: Stream, budget: Budget) -> None:
    """A first pass over the body as it inflates, building nothing: its counts
    against their bounds and its cost against the budget, before a byte of it is
    held whole or an object made (a 213 KB file of 255-parameter events inflated to
    218 MB and took 3.57 GB; one label of 64 KiB named a million lanes, 64 GB)."""
    what = s.what
    s.skip(s.unpack(_H)[0] + 24)  # the kernel's name, grid and cluster
    n_formats, n_blocks, n_tracks, n_events = s.unpack(_HEAD)
    if s.d is None:  # not compressed: the body's size is known, and parse_v1's checks come first
        for n, least, name in ((n_formats, 5, "formats"), (n_blocks, 12, "blocks"), (n_tracks, 14, "tracks")):
            if n * least > len(s.buf) - s.pos:
                raise NanotraceError(f"{what}: {n} {name} cannot fit in {len(s.buf) - s.pos} bytes")
    if n_tracks > MAX_TRACKS or n_events > MAX_EVENTS:
        raise NanotraceError(f"{what}: {n_tracks} tracks and {n_events} events (at most {MAX_TRACKS}, {MAX_EVENTS})")
    budget.charge(
        # a lane's track, its CTA's and (a thread) its warp's, at most
        (n_formats + n_blocks) * COST_RECORD + (3 * n_tracks + 1) * COST_TRACK,
        "its formats, blocks and tracks",
    )
    # each event's two more arguments, its CTA's SM and cluster (tuples shared per CTA)
    budget.charge(n_events * (COST_EVENT + 16), f"its {n_events} events")
    labels, params = array("I"), bytearray()
    for _ in range(n_formats):
        labels.append(s.unpack(_H)[0])
        s.skip(labels[-1])
        s.skip(s.unpack(_H)[0])  # the tooltip
        at = s.need(1)
        params.append(s.buf[at])
    s.skip(12 * n_blocks)
    events = n_args = 0
    for i in range(n_tracks):
        bi, fmt_id, lane = s.unpack(_TRACK)
        if bi >= n_blocks or fmt_id >= n_formats:
            raise NanotraceError(
                f"{what}: track {i} names block {bi} and format {fmt_id} (the file has {n_blocks} and {n_formats})"
            )
        s.skip(4 * params[fmt_id])
        # the label, spelt out in each lane's name with its placeholders filled in
        budget.charge(labels[fmt_id] + 11 + FILLED * params[fmt_id], "its lanes' names")
        count = s.unpack(_COUNT)[0]
        events += count
        if events > n_events:
            raise NanotraceError(f"{what}: more than the {n_events} events its header says")
        named = 0
        for _ in range(count):
            ev_fmt = s.unpack(_EVENT)[2]
            if ev_fmt >= n_formats:
                raise NanotraceError(f"{what}: an event of track {i} names format {ev_fmt} (the file has {n_formats})")
            s.skip(4 * params[ev_fmt])
            n_args += params[ev_fmt]
            named += labels[ev_fmt] + FILLED * params[ev_fmt]
            if n_args > MAX_ARGS or named > budget.limit:
                break
        if n_args > MAX_ARGS:
            raise NanotraceError(f"{what}: more than {MAX_ARGS} event parameters")
        budget.charge(named, "its events' names")
    budget.charge(n_args * COST_ARG, f"its {n_args} event parameters")
    budget.inflated(s.size())


def parse_v1(data: bytes, what: str, memory: int = DEFAULT_MEMORY) -> Nanotrace:
    r = Reader(data, what)
    r.need(len(V1_MAGIC))
    version, compressed = r.unpack("<BB")
    if version != 1:
        raise NanotraceError(f"{what}: version {version} after the version 1 magic")
    body = data[r.pos :]
    _scan(Stream(memoryview(data)[r.pos :], bool(compressed), MAX_BODY, what), Budget(what, memory))
    if compressed:
        body = inflate(body, MAX_BODY, what)
    r = Reader(body, what)
    t = Nanotrace(version=1)
    t.kernel = r.text(r.unpack("<H")[0])
    t.grid, t.cluster = r.unpack("<3I"), r.unpack("<3I")
    n_formats, n_blocks, n_tracks, n_events = r.unpack("<IIIQ")
    # every record takes at least this many bytes: counts past them cannot be honest
    for n, least, name in ((n_formats, 5, "formats"), (n_blocks, 12, "blocks"), (n_tracks, 14, "tracks")):
        if n * least > r.left():
            raise NanotraceError(f"{what}: {n} {name} cannot fit in {r.left()} bytes")
    if n_tracks > MAX_TRACKS or n_events > MAX_EVENTS:
        raise NanotraceError(f"{what}: {n_tracks} tracks and {n_events} events (at most {MAX_TRACKS}, {MAX_EVENTS})")
    formats = []
    for _ in range(n_formats):
        label = r.text(r.unpack("<H")[0])
        r.text(r.unpack("<H")[0])  # the tooltip
        formats.append((label, r.unpack("<B")[0]))
    blocks = [r.unpack("<IIHH") for _ in range(n_blocks)]  # block id, cluster id, SM, format
    # each event keeps its CTA's SM and cluster as arguments, as the viewer shows them
    cta_args = [(("sm", b[2]), ("cluster", b[1])) for b in blocks]
    t.clocks[0] = (0, "kernel start (ns)", 0, 1_000_000_000)
    root = Track(1, 0, 0, t.kernel, KERNEL)
    t.tracks[1] = root
    block_track: dict[int, int] = {}
    warp_track: dict[tuple[int, int], int] = {}  # (block, warp) -> the track its threads go under
    n_args = 0
    # names and argument tuples, one object each however many events share them (a CTA's
    # lanes its arguments, the file its names): 175-190 bytes an event read, not 339
    data, events, texts, arg_tuples, n_fmt = r.data, t.events, {}, {}, len(formats)
    append = events.append
    for i in range(n_tracks):
        bi, fmt_id = r.unpack("<IH")
        lane = r.unpack("<I")[0]
        if bi >= len(blocks) or fmt_id >= len(formats):
            raise NanotraceError(
                f"{what}: track {i} names block {bi} and format {fmt_id} "
                f"(the file has {len(blocks)} and {len(formats)})"
            )
        track_params = r.unpack(f"<{formats[fmt_id][1]}I")  # the track's format parameters
        block_id = blocks[bi][0]
        if bi not in block_track:
            block_track[bi] = len(t.tracks) + 1
            t.tracks[block_track[bi]] = Track(block_track[bi], 1, 0, f"CTA {block_id}", THREAD_BLOCK, block_id)
        label = formats[fmt_id][0]
        name = fill(label, blocks[bi], t.grid, lane, track_params) if label else f"lane {lane}"
        parent, kind = block_track[bi], WARP
        if "thread" in label.lower():  # the viewer's rule: a thread, under warp lane // 32
            warp = lane // 32
            if (bi, warp) not in warp_track:
                warp_track[(bi, warp)] = len(t.tracks) + 1
                t.tracks[warp_track[(bi, warp)]] = Track(warp_track[(bi, warp)], parent, 0, f"Warp {warp}", WARP, warp)
            parent, kind = warp_track[(bi, warp)], GENERIC
        tid = len(t.tracks) + 1
        t.tracks[tid] = Track(tid, parent, 0, name, kind, lane)
        count = r.unpack("<I")[0]
        if len(events) + count > MAX_EVENTS:
            raise NanotraceError(f"{what}: more than {MAX_EVENTS} events")
        # the lane's events that share a format and parameters share a name and an
        # arguments tuple: a lane's few kinds of event, not a string and a list each
        shared: dict = {}
        for _ in range(count):
            start, dur, ev_fmt = _EVENT.unpack_from(data, r.need(10))
            if ev_fmt >= n_fmt:
                raise NanotraceError(f"{what}: an event of track {i} names format {ev_fmt} (the file has {n_fmt})")
            k = formats[ev_fmt][1]
            params = _PARAMS[k].unpack_from(data, r.need(4 * k)) if k else ()
            n_args += k
            got = shared.get((ev_fmt, params))
            if got is None:
                if len(shared) >= SHARED:  # a lane whose events seldom repeat: kept no longer
                    shared.clear()
                if n_args > MAX_ARGS:
                    raise NanotraceError(f"{what}: more than {MAX_ARGS} event parameters")
                text = fill(formats[ev_fmt][0], blocks[bi], t.grid, lane, params)
                ev_args = arg_tuples.get((bi, params))
                if ev_args is None:
                    if len(arg_tuples) >= SHARED:  # parameters that seldom repeat: no point keeping them
                        arg_tuples.clear()
                    ev_args = arg_tuples[bi, params] = (*zip(KEYS, params), *cta_args[bi])
                if len(texts) >= SHARED:  # names that seldom repeat
                    texts.clear()
                got = shared[ev_fmt, params] = (texts.setdefault(text, text), ev_args)
            append(Event(tid, start, dur, got[0], SLICE, 0, 0, got[1]))
        if n_args > MAX_ARGS:
            raise NanotraceError(f"{what}: more than {MAX_ARGS} event parameters")
    if len(t.events) != n_events:
        raise NanotraceError(f"{what}: {len(t.events)} events where its header says {n_events}")
    return t
