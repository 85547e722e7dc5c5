"""Version 4 (aikitoria/nanotrace docs/nanotrace.md at 0cf56be): its reader and,
beside it, its writer."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from .model import (
    CH_ARGS,
    CH_CLOCKS,
    CH_EVENTS,
    CH_FORMATS,
    CH_SESSION,
    CH_SNAPSHOTS,
    CH_STRINGS,
    CH_TRACKS,
    COST_ARG,
    COST_EVENT,
    COST_RECORD,
    COST_TRACK,
    DEFAULT_MEMORY,
    MAX_ARGS,
    MAX_BODY,
    MAX_DEPTH,
    MAX_EVENTS,
    MAX_TRACKS,
    V4_MAGIC,
    Event,
    Nanotrace,
    NanotraceError,
    Track,
    inflate,
    Reader,
    Budget,
)


# chunk type -> (the fewest bytes a record of it takes, what it costs read)
_RECORDS = {
    CH_STRINGS: (4, COST_RECORD),
    CH_CLOCKS: (24, COST_RECORD),
    CH_SNAPSHOTS: (32, COST_RECORD),
    CH_TRACKS: (44, COST_TRACK),
    CH_EVENTS: (5, COST_EVENT),
    CH_ARGS: (3, COST_ARG),
    CH_FORMATS: (3, COST_RECORD),
}


def parse_v4(data: bytes, what: str, memory: int = DEFAULT_MEMORY) -> Nanotrace:
    r = Reader(data, what)
    _, major, minor, endian, flags, _, usize, ssize = r.unpack("<8sHHBBHQQ")
    if major != 4 or endian != 1 or flags & ~1:
        raise NanotraceError(
            f"{what}: version {major}.{minor}, endianness {endian}, flags {flags:#x}: "
            "only 4.x little-endian with flag bit 0 is read"
        )
    if ssize != r.left() or usize > MAX_BODY:
        raise NanotraceError(
            f"{what}: its header says {ssize} stored and {usize} inflated bytes; the file holds "
            f"{r.left()} (inflated at most {MAX_BODY})"
        )
    budget = Budget(what, memory)
    budget.inflated(usize)  # each chunk's records are charged below before they are read
    body = inflate(data[r.pos :], usize, what) if flags & 1 else data[r.pos :]
    if len(body) != usize:
        raise NanotraceError(f"{what}: its body is {len(body)} bytes, its header says {usize}")
    t = Nanotrace(version=4)
    strings: list[str] = []
    raw_tracks, raw_events, args = [], [], []
    r = Reader(body, what)
    while r.left():
        if r.left() < 24 or struct.unpack_from("<Q", body, r.pos + 8)[0] > r.left() - 24:
            t.skip("bytes of a short tail (a chunk's header or body cut off)", r.left())
            break
        ctype, _, size, count = r.unpack("<IIQQ")
        c = Reader(r.view(size), f"{what}: chunk {ctype}")
        if ctype in _RECORDS:
            # each record charged before it is read; a count past what the chunk can
            # hold is refused below, where it is read (_fits)
            least, cost = _RECORDS[ctype]
            held = size if ctype == CH_STRINGS else 0  # the strings, copied out of the body
            budget.charge(min(count, size // least) * cost + held, f"its {count} records of chunk {ctype}")
        if ctype == CH_SESSION:
            t.session = c.text(c.unpack("<I")[0])
            t.reference_clock = c.unpack("<II")[0]
        elif ctype == CH_STRINGS:
            _fits(c, count, 4)
            strings += [c.text(c.unpack("<I")[0]) for _ in range(count)]
        elif ctype == CH_CLOCKS:
            _fits(c, count, 24)
            for _ in range(count):
                cid, kind, _, _, name, dev, freq = c.unpack("<IBBHIIQ")
                t.clocks[cid] = (kind, name, dev, freq)
        elif ctype == CH_SNAPSHOTS:
            _fits(c, count, 32)
            t.snapshots += [c.unpack("<IIQQQ") for _ in range(count)]
        elif ctype == CH_TRACKS:
            _fits(c, count, 44)
            if len(raw_tracks) + count > MAX_TRACKS:
                raise NanotraceError(f"{what}: more than {MAX_TRACKS} tracks")
            raw_tracks += [c.unpack("<QQIIBBHiIQ") for _ in range(count)]
        elif ctype == CH_EVENTS:
            raw_events += _events(c, count, len(raw_events))
        elif ctype == CH_ARGS:
            args += _args(c, count, len(args), t)
        elif ctype == CH_FORMATS:
            _fits(c, count, 3)
            for _ in range(count):
                label, tooltip = c.varuint(), c.varuint()
                t.formats[label] = (tooltip, c.unpack("<B")[0])  # string ids: _resolve names them
    return _resolve(t, strings, raw_tracks, raw_events, args, what, budget)


def _fits(c: Reader, count: int, least: int) -> None:
    if count * least > c.left():
        raise NanotraceError(f"{c.what}: {count} records cannot fit in {c.left()} bytes")


def _events(c: Reader, count: int, before: int) -> list:
    if c.varuint() != count or before + count > MAX_EVENTS:
        raise NanotraceError(f"{c.what}: its event count disagrees with its header, or passes {MAX_EVENTS}")
    _fits(c, count, 5)
    out, last = [], {}
    for _ in range(count):
        track, delta, dur, name = c.varuint(), c.zigzag(), c.varuint(), c.varuint()
        flags = c.unpack("<B")[0]
        parent = c.varuint() if flags & 4 else 0
        corr = c.varuint() if flags & 8 else 0
        first, n_args = (c.varuint(), c.varuint()) if flags & 16 else (0, 0)
        colour = c.varuint() if flags & 32 else 0  # the viewer's, kept for a written file
        last[track] = start = last.get(track, 0) + delta
        out.append((track, start, dur, name, flags & 3, parent, corr, first, n_args, colour))
    return out


def _args(c: Reader, count: int, before: int, t: Nanotrace) -> list:
    if before + count > MAX_ARGS:
        raise NanotraceError(f"{c.what}: more than {MAX_ARGS} arguments")
    _fits(c, count, 3)
    out = []
    for _ in range(count):
        name, kind = c.varuint(), c.unpack("<B")[0]
        if kind in (0, 3, 4):
            value = c.varuint()
        elif kind == 1:
            value = c.zigzag()
        elif kind == 2:
            value = c.unpack("<d")[0]
        else:  # a kind newer than this reader: its value read as an unsigned varint
            value = c.varuint()
            t.skip("arguments of a kind past 4 (read as integers)")
            kind = 0
        out.append((name, kind, value))
    return out


def _resolve(
    t: Nanotrace, strings: list, raw_tracks: list, raw_events: list, args: list, what: str, budget: Budget
) -> Nanotrace:
    def s(i: int) -> str:
        if i >= len(strings) and i:
            raise NanotraceError(f"{what}: string {i} named, the file has {len(strings)}")
        return strings[i] if i else ""

    # A clock's name by its text (its string id is this file's: a file written from
    # the model numbers its strings anew)
    t.clocks = {cid: (kind, s(name), dev, freq) for cid, (kind, name, dev, freq) in t.clocks.items()}
    for tid, parent, clock, name, kind, _, _, order, _, source in raw_tracks:
        if not tid or tid in t.tracks:
            raise NanotraceError(f"{what}: track id {tid} is zero or given twice")
        t.tracks[tid] = Track(tid, parent, clock, s(name), kind, source, order)
    # A string is held once however often it is named, but every trace written from
    # the file spells it out at each reference: 3 440 bytes whose 1 000 events and
    # their 100 000 arguments all named one 64 KiB string wrote 12.5 GB of NDJSON.
    budget.charge(sum(len(tr.name) for tr in t.tracks.values()), "its tracks' names")
    for tr in t.tracks.values():
        depth, p = 0, tr.parent
        while p:
            if p not in t.tracks or depth >= MAX_DEPTH:
                raise NanotraceError(
                    f"{what}: track {tr.id}'s parents name a missing track, loop, or pass {MAX_DEPTH} levels"
                )
            p, depth = t.tracks[p].parent, depth + 1
    # Each event names a range of the arguments, and each is copied: events that all
    # named the same 100 000 (459 bytes) took 711 MB. A writer names each argument
    # once, so the events may name at most as many in all as the file holds.
    t.formats = {s(label): (s(tooltip), fl) for label, (tooltip, fl) in t.formats.items()}
    named = sum(e[8] for e in raw_events)
    if named > len(args):
        raise NanotraceError(
            f"{what}: its events name {named} arguments in all, the file holds {len(args)} (each may be named once)"
        )
    spelt, room = 0, budget.limit - budget.used
    for i, (track, start, dur, name, kind, parent, corr, first, n_args, colour) in enumerate(raw_events, 1):
        if parent > len(raw_events) or first + n_args > len(args):
            raise NanotraceError(
                f"{what}: event {i} names parent {parent} or arguments {first}+{n_args} that the file lacks"
            )
        if track not in t.tracks:  # kept (event ids stay each event's place), never placed
            t.skip("events on a track the file lacks")
        ev_args = tuple(
            (s(n), s(v) if k == 3 else bool(v) if k == 4 else v) for n, k, v in args[first : first + n_args]
        )
        text = s(name)
        spelt += len(text) + sum(len(n) + (len(v) if isinstance(v, str) else 0) for n, v in ev_args)
        if spelt > room:
            break
        t.events.append(Event(track, start, dur, text, kind, parent, corr, ev_args, colour))
    budget.charge(spelt, "the strings its events name")
    return t


# ---- writing version 4 ----


def _varuint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _zigzag(v: int) -> bytes:
    return _varuint((v << 1) ^ (v >> 63) if v < 0 else v << 1)


def encode_v4(t: Nanotrace) -> bytes:
    """The model as a version 4 file (compressed), as docs/nanotrace.md lays it out."""
    strings, index = [""], {"": 0}

    def sid(text: str) -> int:
        if text not in index:
            index[text] = len(strings)
            strings.append(text)
        return index[text]

    def chunk(ctype: int, payload: bytes, count: int) -> bytes:
        return struct.pack("<IIQQ", ctype, 0, len(payload), count) + payload

    name = t.session.encode()
    parts = [chunk(CH_SESSION, struct.pack("<I", len(name)) + name + struct.pack("<II", t.reference_clock, 0), 1)]
    parts.append(
        chunk(
            CH_CLOCKS,
            b"".join(
                struct.pack("<IBBHIIQ", cid, kind, 0, 0, sid(nm if isinstance(nm, str) else ""), dev, freq)
                for cid, (kind, nm, dev, freq) in t.clocks.items()
            ),
            len(t.clocks),
        )
    )
    parts.append(chunk(CH_SNAPSHOTS, b"".join(struct.pack("<IIQQQ", *s) for s in t.snapshots), len(t.snapshots)))
    parts.append(
        chunk(
            CH_TRACKS,
            b"".join(
                struct.pack(
                    "<QQIIBBHiIQ", tr.id, tr.parent, tr.clock, sid(tr.name), tr.kind, 0, 0, tr.order, 0, tr.source_id
                )
                for tr in t.tracks.values()
            ),
            len(t.tracks),
        )
    )
    events, args, last = bytearray(_varuint(len(t.events))), bytearray(), {}
    n_args = 0
    for e in t.events:
        flags = e.kind | (4 if e.parent else 0) | (8 if e.correlation else 0) | (16 if e.args else 0)
        flags |= 32 if e.colour else 0
        events += _varuint(e.track) + _zigzag(e.start - last.get(e.track, 0)) + _varuint(e.duration)
        events += _varuint(sid(e.name)) + bytes([flags])
        last[e.track] = e.start
        if e.parent:
            events += _varuint(e.parent)
        if e.correlation:
            events += _varuint(e.correlation)
        if e.args:
            events += _varuint(n_args) + _varuint(len(e.args))
            for k, v in e.args:
                if isinstance(v, bool):
                    args += _varuint(sid(k)) + bytes([4]) + _varuint(int(v))
                elif isinstance(v, str):
                    args += _varuint(sid(k)) + bytes([3]) + _varuint(sid(v))
                elif isinstance(v, float):
                    args += _varuint(sid(k)) + bytes([2]) + struct.pack("<d", v)
                elif v < 0:
                    args += _varuint(sid(k)) + bytes([1]) + _zigzag(v)
                else:
                    args += _varuint(sid(k)) + bytes([0]) + _varuint(v)
            n_args += len(e.args)
        if e.colour:
            events += _varuint(e.colour)
    parts += [chunk(CH_EVENTS, bytes(events), len(t.events)), chunk(CH_ARGS, bytes(args), n_args)]
    if t.formats:
        formats = b"".join(
            _varuint(sid(label)) + _varuint(sid(tooltip)) + bytes([fl & 0xFF])
            for label, (tooltip, fl) in t.formats.items()
        )
        parts.append(chunk(CH_FORMATS, formats, len(t.formats)))
    text = b"".join(struct.pack("<I", len(b)) + b for b in (x.encode() for x in strings))
    parts.insert(1, chunk(CH_STRINGS, text, len(strings)))
    body = b"".join(parts)
    packed = zlib.compress(body)
    return struct.pack("<8sHHBBHQQ", V4_MAGIC, 4, 0, 1, 1, 0, len(body), len(packed)) + packed


def write_v4(t: Nanotrace, path) -> None:
    Path(path).write_bytes(encode_v4(t))
