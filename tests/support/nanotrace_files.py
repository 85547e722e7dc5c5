"""`.nanotrace` files for the tests, laid out as their public writers lay them out:
version 1 as cutedsl-trace's viewer reads it (visualizer/parser.js at 5db9688),
version 4 through our writer, on %globaltimer mapped to CLOCK_MONOTONIC_RAW."""

from __future__ import annotations

import struct
import zlib

from gpu_agent.timeline import nanotrace as nt
from gpu_agent.timeline.nanotrace.model import KERNEL, THREAD_BLOCK, WARP


def v1_file(
    compressed: bool = True,
    events_per_lane: int = 2,
    kernel: str = "my_kernel",
    grid: tuple = (2, 1, 1),
    step: int = 100,
) -> bytes:
    """Two CTAs of two lanes (0 and 32); event k of a lane starts at step*k + lane ns
    and lasts 40 ns."""

    def s(text: str) -> bytes:
        return struct.pack("<H", len(text)) + text.encode()

    body = s(kernel) + struct.pack("<3I3I", *grid, 1, 1, 1)
    formats = [("Warp {lane}", "", 0), ("tma load", "stage {0}", 1), ("mma", "", 0)]
    body += struct.pack("<IIIQ", len(formats), 2, 4, 4 * events_per_lane)
    for label, tip, n in formats:
        body += s(label) + s(tip) + bytes([n])
    body += struct.pack("<IIHH", 0, 0, 3, 0) + struct.pack("<IIHH", 1, 0, 7, 0)
    for block in range(2):
        for lane in (0, 32):
            body += struct.pack("<IHI", block, 0, lane) + struct.pack("<I", events_per_lane)
            for k in range(events_per_lane):
                fmt = 1 + k % 2
                body += struct.pack("<IIH", step * k + lane, 40, fmt) + (struct.pack("<I", k) if fmt == 1 else b"")
    return b"nanotrace\0" + bytes([1, int(compressed)]) + (zlib.compress(body) if compressed else body)


GLOBALTIMER_AT_RAW0 = 5_000_000_000  # %globaltimer reads this much more than CLOCK_MONOTONIC_RAW


def v4_kernel(kernel: str, start_raw: int, span_ns: int, ctas: int = 2, warps: int = 2) -> nt.Nanotrace:
    """One kernel (its own slice from start_raw, CLOCK_MONOTONIC_RAW ns, for span_ns)
    with ctas x warps tracks, each warp two events inside the span, on a
    %globaltimer clock mapped to CLOCK_MONOTONIC_RAW by two snapshots."""
    t = nt.Nanotrace(version=4, session="test", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000), 3: (3, 0, 0, 1_000_000_000)}
    g = GLOBALTIMER_AT_RAW0
    t.snapshots = [
        (3, 1, start_raw + g - 10_000_000, start_raw - 10_000_000, 100),
        (3, 1, start_raw + g + 10_000_000, start_raw + 10_000_000, 100),
    ]
    t.tracks[1] = nt.Track(1, 0, 3, kernel, KERNEL)
    t.events.append(nt.Event(1, start_raw + g, span_ns, kernel))
    tid = 2
    for cta in range(ctas):
        t.tracks[tid] = nt.Track(tid, 1, 3, f"CTA {cta}", THREAD_BLOCK, cta)
        block = tid
        tid += 1
        for warp in range(warps):
            t.tracks[tid] = nt.Track(tid, block, 3, f"warp {warp}", WARP, warp)
            for k in range(2):
                t.events.append(
                    nt.Event(
                        tid,
                        start_raw + g + (k + 1) * span_ns // 4,
                        span_ns // 5,
                        "mma" if k else "load",
                        args=(("k", k), ("scale", 0.5)),
                    )
                )
            tid += 1
    return t


def v4_launches(kernel: str, starts_raw: list[int], span_ns: int, ctas: int = 2, warps: int = 2) -> nt.Nanotrace:
    """Several launches of one kernel as upstream's GpuProcessTrace lays them out
    (AddKernelTrace with GpuKernelTraceOptions' expected_invocation_count): each
    launch a slice on its stream's track (its HES kernel event, CLOCK_MONOTONIC_RAW,
    from starts_raw[i] for span_ns), ONE kernel track beneath the stream, its CTA and
    warp tracks shared by the launches, and each in-kernel event naming its launch's
    slice as Event.parent; on %globaltimer, two events a warp a launch."""
    t = nt.Nanotrace(version=4, session="test", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000), 3: (3, 0, 0, 1_000_000_000)}
    g = GLOBALTIMER_AT_RAW0
    lo, hi = min(starts_raw), max(starts_raw)
    t.snapshots = [(3, 1, lo + g - 10_000_000, lo - 10_000_000, 100), (3, 1, hi + g + 10_000_000, hi + 10_000_000, 100)]
    t.tracks[1] = nt.Track(1, 0, 1, "Stream 13", 3, 13)
    t.tracks[2] = nt.Track(2, 1, 3, kernel, KERNEL)
    for start in starts_raw:
        t.events.append(nt.Event(1, start, span_ns, kernel))
    warp_tracks, tid = [], 3
    for cta in range(ctas):
        t.tracks[tid] = nt.Track(tid, 2, 3, f"CTA {cta}", THREAD_BLOCK, cta)
        block, tid = tid, tid + 1
        for warp in range(warps):
            t.tracks[tid] = nt.Track(tid, block, 3, f"warp {warp}", WARP, warp)
            warp_tracks.append(tid)
            tid += 1
    for launch, start in enumerate(starts_raw, 1):
        for track in warp_tracks:
            for k in range(2):
                at = start + g + (k + 1) * span_ns // 4
                t.events.append(nt.Event(track, at, span_ns // 5, "mma" if k else "load", parent=launch))
    return t


def v4_arg_bomb(events: int, args: int) -> bytes:
    """A version 4 file of one track whose `events` events all name the same `args`
    arguments (issue 44: 510 bytes of 5 000 x 100 000 asked for about 37 GB)."""
    from gpu_agent.timeline.nanotrace import v4

    t = nt.Nanotrace(version=4, session="bomb", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000)}
    t.tracks[1] = nt.Track(1, 0, 1, "k", KERNEL)  # string 1
    t.events.append(nt.Event(1, 0, 10, "k", args=(("a", 0),) * args))
    raw = v4.encode_v4(t)
    head = struct.calcsize("<8sHHBBHQQ")
    body, out, at = zlib.decompress(raw[head:]), b"", 0
    while at < len(body):
        ctype, _, size, count = struct.unpack_from("<IIQQ", body, at)
        payload = body[at + 24 : at + 24 + size]
        if ctype == 6:  # the events: each names arguments 0..args-1
            one = v4._varuint(1) + v4._zigzag(0) + v4._varuint(10) + v4._varuint(1) + bytes([16])
            payload = v4._varuint(events) + (one + v4._varuint(0) + v4._varuint(args)) * events
            count = events
        out += struct.pack("<IIQQ", ctype, 0, len(payload), count) + payload
        at += 24 + size
    packed = zlib.compress(out, 9)
    return struct.pack("<8sHHBBHQQ", b"NTRACE4\0", 4, 0, 1, 1, 0, len(out), len(packed)) + packed


def _v4_chunk(ctype: int, payload: bytes, count: int) -> bytes:
    return struct.pack("<IIQQ", ctype, 0, len(payload), count) + payload


def _v4_file(body: bytes) -> bytes:
    packed = zlib.compress(body, 9)
    return struct.pack("<8sHHBBHQQ", b"NTRACE4\0", 4, 0, 1, 1, 0, len(body), len(packed)) + packed


def v4_name_bomb(events: int, name_len: int = 1 << 16, arg_refs: int = 0) -> bytes:
    """A version 4 file whose kernel `k` holds one warp of `events` events that all
    name one string of `name_len` bytes, each with `arg_refs` arguments whose name
    and value are that string too (issue 44: strings x references). The reader holds
    the string once; everything downstream (the placed events, their NDJSON, Perfetto
    or Chrome lines) spells it out at each reference."""
    from gpu_agent.timeline.nanotrace import v4

    big = b"x" * name_len
    strings = b"".join(struct.pack("<I", len(s)) + s for s in (b"", b"k", big))
    tracks = struct.pack("<QQIIBBHiIQ", 1, 0, 1, 1, KERNEL, 0, 0, 0, 0, 0)
    tracks += struct.pack("<QQIIBBHiIQ", 2, 1, 1, 0, WARP, 0, 0, 0, 0, 0)
    one = v4._varuint(2) + v4._zigzag(1) + v4._varuint(1) + v4._varuint(2)
    ev = bytearray(v4._varuint(events))
    for i in range(events):
        ev += one + (bytes([16]) + v4._varuint(i * arg_refs) + v4._varuint(arg_refs) if arg_refs else bytes([0]))
    args = (v4._varuint(2) + bytes([3]) + v4._varuint(2)) * (events * arg_refs)
    body = _v4_chunk(1, struct.pack("<I", 4) + b"bomb" + struct.pack("<II", 1, 0), 1)
    body += _v4_chunk(2, strings, 3) + _v4_chunk(3, struct.pack("<IBBHIIQ", 1, 0, 0, 0, 0, 0, 10**9), 1)
    body += _v4_chunk(5, tracks, 2) + _v4_chunk(6, bytes(ev), events) + _v4_chunk(7, args, events * arg_refs)
    return _v4_file(body)


def v1_bomb(events: int = 0, params: int = 255, tracks: int = 1, label_len: int = 4, kernel: str = "k") -> bytes:
    """A compressed version 1 file of one kernel (grid 1x1x1): `tracks` lanes of one
    CTA, the first with `events` events of `params` parameters each (a version 1
    event holds up to 255), every lane named from one format label of `label_len`
    bytes (issue 44: a 213 KB file of 255-parameter events took the reader to 3.57 GB;
    a long label is spelt out again in each lane's name)."""
    label = b"w" * label_len

    def s(text: bytes) -> bytes:
        return struct.pack("<H", len(text)) + text

    body = s(kernel.encode()) + struct.pack("<3I3I", 1, 1, 1, 1, 1, 1)
    body += struct.pack("<IIIQ", 2, 1, tracks, events)
    body += s(label) + s(b"") + bytes([0]) + s(b"e") + s(b"") + bytes([params])
    body += struct.pack("<IIHH", 0, 0, 0, 0)
    one = struct.pack("<IIH", 0, 1, 1) + bytes(4 * params)
    z = zlib.compressobj(9)
    out = [z.compress(body + struct.pack("<IHI", 0, 0, 0) + struct.pack("<I", events))]
    step = max(1, (1 << 20) // len(one))
    for at in range(0, events, step):
        out.append(z.compress(one * min(step, events - at)))
    lane = struct.pack("<IHI", 0, 0, 1) + struct.pack("<I", 0)
    for at in range(1, tracks, 1 << 16):
        out.append(z.compress(lane * min(1 << 16, tracks - at)))
    out.append(z.flush())
    return b"nanotrace\0" + bytes([1, 1]) + b"".join(out)
