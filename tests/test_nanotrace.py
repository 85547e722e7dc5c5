"""The .nanotrace reader and writer (gpu_agent.timeline.nanotrace): both versions
read from files laid out as their public writers lay them out, a written file
read back and checked against the format's description, and hostile files that
must end in one NanotraceError line, never another exception or a hang."""

import random
import struct
import subprocess
import sys
import tracemalloc
import zlib

import pytest

from gpu_agent.timeline import nanotrace as nt
from gpu_agent.timeline.nanotrace.model import KERNEL, THREAD_BLOCK, WARP
from support.nanotrace_files import v1_file


def sample_trace() -> nt.Nanotrace:
    """A kernel with two CTAs of two warps, on %globaltimer mapped through CUPTI's
    clock to CLOCK_MONOTONIC_RAW by two snapshots each."""
    t = nt.Nanotrace(version=4, session="gemm", reference_clock=1)
    t.clocks = {
        1: (0, "CLOCK_MONOTONIC_RAW", 0, 1_000_000_000),
        2: (2, "CUPTI", 0, 1_000_000_000),
        3: (3, "%globaltimer", 0, 1_000_000_000),
    }
    t.snapshots = [
        (3, 2, 1_000, 50_000, 5),
        (3, 2, 2_001_000, 2_050_010, 5),
        (2, 1, 0, 7_000_000, 20),
        (2, 1, 10_000_000, 17_000_000, 20),
    ]
    t.tracks[1] = nt.Track(1, 0, 3, "gemm_kernel", KERNEL)
    tid = 2
    for cta in range(2):
        t.tracks[tid] = nt.Track(tid, 1, 3, f"CTA {cta}", THREAD_BLOCK, cta)
        block = tid
        tid += 1
        for warp in range(2):
            t.tracks[tid] = nt.Track(tid, block, 3, f"warp {warp}", WARP, warp, order=-warp)
            for k in range(3):
                start = 1_000 + cta * 700 + warp * 50 + k * 200 - (30 if k == 2 else 0)  # one step back: signed delta
                t.events.append(
                    nt.Event(
                        tid,
                        start,
                        90,
                        "mma" if k else "load",
                        correlation=7 + k,
                        args=(("k", k), ("bias", -3), ("scale", 0.5), ("tile", "A"))[: k + 1],
                    )
                )
            tid += 1
    t.events.append(nt.Event(2, 1_100, 10, "barrier", parent=1))
    return t


def test_a_written_file_reads_back_whole():
    t = sample_trace()
    back = nt.parse(nt.encode_v4(t))
    assert back.version == 4 and back.session == "gemm" and back.reference_clock == 1
    assert back.tracks == t.tracks
    assert back.events == t.events
    assert back.clocks == t.clocks and back.snapshots == t.snapshots and back.absolute


def test_clock_names_survive_a_read_and_a_write():
    """Issue 46: the reader kept a clock's name as the file's string id, and the writer
    wrote that id into a file whose strings it numbers anew: the name pointed at another
    string (here a track's). Names are text in the model now."""
    t = sample_trace()
    once = nt.parse(nt.encode_v4(t))
    twice = nt.parse(nt.encode_v4(once))
    assert once.clocks == twice.clocks == t.clocks
    assert {c[1] for c in twice.clocks.values()} == {"CLOCK_MONOTONIC_RAW", "CUPTI", "%globaltimer"}


def test_formats_colours_and_booleans_survive_a_round_trip():
    """Issue 46: a round trip dropped the format records, the events' colours and the
    Boolean argument kind (written back as an integer), so the viewer showed unfilled
    templates and 1 for true."""
    t = sample_trace()
    t.formats = {"load": ("load {k} at scale {scale}", 1), "barrier": ("all warps wait", 0)}
    t.events[0].colour = 0xFF8800
    t.events[-1].args = (("last", True), ("first", False))
    back = nt.parse(nt.encode_v4(nt.parse(nt.encode_v4(t))))
    assert back.formats == t.formats
    assert back.events == t.events and back.events[0].colour == 0xFF8800
    assert [type(v) for _, v in back.events[-1].args] == [bool, bool]


def test_a_version_1_file_writes_as_version_4_and_reads_back():
    """Issue 46: writing a version 1 model as version 4 raised struct.error (its clock's
    name is text). Its tracks, events and arguments read back the same."""
    v1 = nt.parse(v1_file(False))
    back = nt.parse(nt.encode_v4(v1))
    assert back.version == 4 and back.tracks == v1.tracks and back.events == v1.events
    assert back.clocks == v1.clocks


def test_a_written_file_follows_the_format_description():
    """Our own checks of docs/nanotrace.md's layout, on the bytes we write."""
    t = sample_trace()
    data = nt.encode_v4(t)
    magic, major, minor, endian, flags, reserved, usize, ssize = struct.unpack_from("<8sHHBBHQQ", data)
    assert (magic, major, minor, endian, flags, reserved) == (b"NTRACE4\0", 4, 0, 1, 1, 0)
    assert ssize == len(data) - 32
    body = zlib.decompress(data[32:])
    assert len(body) == usize
    pos, seen = 0, {}
    while pos < len(body):
        ctype, cflags, size, count = struct.unpack_from("<IIQQ", body, pos)
        assert cflags == 0
        payload = body[pos + 24 : pos + 24 + size]
        assert len(payload) == size
        seen[ctype] = (payload, count)
        pos += 24 + size
    assert pos == len(body)
    strings, n = seen[2]
    assert struct.unpack_from("<I", strings)[0] == 0  # string 0 is the empty string
    for ctype, width in ((3, 24), (4, 32), (5, 44)):  # fixed-width records
        assert len(seen[ctype][0]) == width * seen[ctype][1]
    events, count = seen[6]
    assert count == len(t.events) and events[0] == count  # the payload starts with the count as a varuint
    track_ids = [struct.unpack_from("<Q", seen[5][0], 44 * i)[0] for i in range(seen[5][1])]
    assert 0 not in track_ids and len(set(track_ids)) == len(track_ids)


def test_clocks_map_globaltimer_through_cupti_to_the_reference():
    t = sample_trace()
    # halfway between the %globaltimer snapshots: 50 000 + (1 001 000 / 2 000 000) x 2 000 010, then +7 000 000
    mid = nt.to_reference(t, 3, 1_001_000)
    assert mid == pytest.approx(7_000_000 + 50_000 + 1_000_005)
    assert nt.to_reference(t, 1, 123) == 123
    t.snapshots = [s for s in t.snapshots if s[0] != 2]
    with pytest.raises(nt.NanotraceError, match="no snapshot"):
        nt.to_reference(t, 3, 5)


def test_clocks_map_exactly_at_the_wall_clock_s_magnitude():
    """Issue 46: at about 1.76e18 ns a float's step is 256 ns, and mapping in floats put
    events 224-352 ns off where upstream's viewer maps within 1 ns (in-kernel events
    last tens of ns). Each time is mapped in integers: the nearest ns of the exact
    rational mapping, for a pair of snapshots and for one with the clocks' rates."""
    from fractions import Fraction

    t = nt.Nanotrace(version=4, session="s", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000), 2: (3, 0, 0, 1_000_000_000), 3: (3, 0, 0, 999_999_937)}
    x0, y0 = 1_764_000_000_000_000_123, 1_764_000_123_456_789_001
    x1, y1 = x0 + 2_000_000_017, y0 + 2_000_000_101  # the GPU's clock a little slow
    t.snapshots = [(2, 1, x0, y0, 5), (2, 1, x1, y1, 5), (3, 1, x0, y0, 5)]
    for dx in (0, 1, 37, 999_999_999, 1_234_567_891, 2_000_000_017, 3_000_000_000):
        exact = y0 + Fraction(dx * (y1 - y0), x1 - x0)
        got = nt.to_reference(t, 2, x0 + dx)
        assert isinstance(got, int) and abs(got - exact) <= Fraction(1, 2), (dx, got, float(exact))
        one = y0 + Fraction(dx * 1_000_000_000, 999_999_937)  # one snapshot: the rates' ratio
        assert abs(nt.to_reference(t, 3, x0 + dx) - one) <= Fraction(1, 2), dx
    floats = y0 + (1_234_567_891 * (y1 - y0)) / (x1 - x0)  # what the float mapping gave
    assert abs(Fraction(floats) - (y0 + Fraction(1_234_567_891 * (y1 - y0), x1 - x0))) > 1  # 16 ns here, up to 128


def test_version_1_names_are_the_viewer_s():
    """Issue 46: cutedsl-trace's viewer fills a label's placeholders ({lane}, {blockX},
    {N}: the N-th parameter) and puts a thread's track under its warp (lane // 32). The
    reader appended the lane to a label without {lane} ("Producer 0"), kept event names
    as templates ("Load {0} of {1}"), made threads warps and dropped each CTA's SM and
    cluster."""

    def s(text: str) -> bytes:
        return struct.pack("<H", len(text)) + text.encode()

    formats = [
        ("Thread {lane}", "", 0),
        ("Producer", "", 0),
        ("Load {0} of {1}", "a load", 2),
        ("CTA {blockX},{blockY}", "", 0),
    ]
    body = s("k") + struct.pack("<3I3I", 2, 2, 1, 1, 1, 1) + struct.pack("<IIIQ", len(formats), 1, 3, 3)
    body += b"".join(s(label) + s(tip) + bytes([n]) for label, tip, n in formats)
    body += struct.pack("<IIHH", 3, 1, 5, 3)  # block 3 (x 1, y 1 of a 2 x 2 grid), cluster 1, SM 5
    for fmt, lane, events in ((0, 33, [(0, 10, 3, ())]), (1, 0, [(5, 20, 2, (7, 9))]), (0, 40, [(9, 10, 3, ())])):
        body += struct.pack("<IHI", 0, fmt, lane) + struct.pack("<I", len(events))
        for start, dur, efmt, params in events:
            body += struct.pack("<IIH", start, dur, efmt) + struct.pack(f"<{len(params)}I", *params)
    t = nt.parse(b"nanotrace\0" + bytes([1, 0]) + body)
    names = {tr.id: tr for tr in t.tracks.values()}

    def path(tid: int) -> str:
        out = []
        while tid:
            out.append(names[tid].name)
            tid = names[tid].parent
        return " / ".join(reversed(out))

    assert sorted(path(tid) for tid in names if not any(tr.parent == tid for tr in names.values())) == [
        "k / CTA 3 / Producer",
        "k / CTA 3 / Warp 1 / Thread 33",
        "k / CTA 3 / Warp 1 / Thread 40",
    ]
    assert [e.name for e in t.events] == ["CTA 1,1", "Load 7 of 9", "CTA 1,1"]
    # the CTA's SM and cluster, as arguments of each of its events (they were dropped)
    assert t.events[1].args == (("0", 7), ("1", 9), ("sm", 5), ("cluster", 1))


@pytest.mark.parametrize("compressed", [False, True])
def test_version_1_reads_as_ctas_with_warps_inside(compressed):
    t = nt.parse(v1_file(compressed))
    assert t.version == 1 and not t.absolute and t.kernel == "my_kernel" and t.grid == (2, 1, 1)
    kinds = sorted(tr.kind for tr in t.tracks.values())
    assert kinds == [KERNEL, THREAD_BLOCK, THREAD_BLOCK, WARP, WARP, WARP, WARP]
    for e in t.events:
        warp = t.tracks[e.track]
        assert warp.kind == WARP and t.tracks[warp.parent].kind == THREAD_BLOCK
    loads = [e for e in t.events if e.name == "tma load"]
    assert len(t.events) == 8 and len(loads) == 4 and all(e.args[0] == ("0", 0) for e in loads)
    assert {dict(e.args)["sm"] for e in t.events} == {3, 7} and {dict(e.args)["cluster"] for e in t.events} == {0}
    assert sorted(e.start for e in t.events if t.tracks[e.track].source_id == 32) == [32, 32, 132, 132]


def one_line_error(data: bytes, **kw) -> str:
    with pytest.raises(nt.NanotraceError) as e:
        nt.parse(data, "f.nanotrace", **kw)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("f.nanotrace")
    return msg


def test_every_truncation_and_corruption_is_one_error_line():
    files = [nt.encode_v4(sample_trace()), v1_file(False), v1_file(True)]
    rng = random.Random(7)
    for data in files:
        for cut in range(0, len(data) - 1, max(1, len(data) // 97)):
            one_line_error(data[:cut])
        for _ in range(300):
            bad = bytearray(data)
            for _ in range(rng.randint(1, 4)):
                bad[rng.randrange(10, len(bad))] = rng.randrange(256)
            try:
                nt.parse(bytes(bad), "f.nanotrace")
            except nt.NanotraceError as e:
                assert "\n" not in str(e)


def v4_with_body(body: bytes, usize=None, compressed=True) -> bytes:
    stored = zlib.compress(body) if compressed else body
    return (
        struct.pack(
            "<8sHHBBHQQ", b"NTRACE4\0", 4, 0, 1, int(compressed), 0, len(body) if usize is None else usize, len(stored)
        )
        + stored
    )


def test_hostile_files_are_refused_before_they_cost_memory():
    assert "magic" in one_line_error(b"PK\3\4 not a trace")
    # a bomb: 64 MiB of zeros behind a header that admits 1 KiB
    assert "inflates past" in one_line_error(v4_with_body(bytes(64 << 20), usize=1024))
    # counts that cannot fit in their chunk
    huge = struct.pack("<IIQQ", 5, 0, 44, 1 << 40) + bytes(44)
    assert "cannot fit" in one_line_error(v4_with_body(huge))
    count = bytes([0x80] * 5 + [0x20])  # 1 << 40 as a varuint, as the chunk header says
    events = struct.pack("<IIQQ", 6, 0, len(count) + 5, 1 << 40) + count + bytes(5)
    assert "count" in one_line_error(v4_with_body(events))
    overlong = struct.pack("<IIQQ", 6, 0, 11, 1) + bytes([0x80] * 10 + [1])
    assert "varint" in one_line_error(v4_with_body(overlong))
    # a track that is its own grandparent
    loop = b"".join(struct.pack("<QQIIBBHiIQ", i, 3 - i, 0, 0, 6, 0, 0, 0, 0, 0) for i in (1, 2))
    assert "loop" in one_line_error(v4_with_body(struct.pack("<IIQQ", 5, 0, len(loop), 2) + loop))
    # an event on a track the file lacks: read past, counted (upstream's viewer carries on)
    ev = bytes([1, 9, 0, 2, 0, 0])
    lacking = nt.parse(v4_with_body(struct.pack("<IIQQ", 6, 0, len(ev), 1) + ev))
    assert lacking.skipped == {"events on a track the file lacks": 1}
    # a string past its bound, and one that is not UTF-8
    long = struct.pack("<IIQQ", 2, 0, 8, 1) + struct.pack("<I", 1 << 25) + b"abcd"
    assert "string of" in one_line_error(v4_with_body(long))
    bad = struct.pack("<IIQQ", 2, 0, 6, 1) + struct.pack("<I", 2) + b"\xff\xfe"
    assert "UTF-8" in one_line_error(v4_with_body(bad))
    # undefined flag bits, a wrong stored size
    assert "flags" in one_line_error(struct.pack("<8sHHBBHQQ", b"NTRACE4\0", 4, 0, 1, 3, 0, 0, 0))
    assert "stored" in one_line_error(v4_with_body(b"", compressed=False) + b"x")
    # version 1: more tracks than its bytes can hold
    v1 = bytearray(v1_file(False))
    struct.pack_into("<I", v1, 12 + 2 + 9 + 24 + 8, 1 << 30)
    assert "cannot fit" in one_line_error(bytes(v1))


def _patched(data: bytes, edit) -> bytes:
    """A written file with its inflated body edited by edit(bytearray) -> bytes."""
    body = bytearray(zlib.decompress(data[32:]))
    return v4_with_body(bytes(edit(body)))


def test_what_upstream_reads_past_is_read_past_and_counted(tmp_path):
    """Issue 46: upstream's parser carries on where this reader refused the file: a
    70 000-byte string argument (which this project's own writer wrote), an argument
    of a kind past 4, a short tail, events on a track the file lacks, and a clock with
    no snapshot. Each is read past now, counted, and said in the file's line; the
    rest of the file is read and placed."""
    from gpu_agent.timeline.inkernel import Spec, place_all
    from gpu_agent.timeline.model import KernelEvent, Timeline

    t = sample_trace()
    t.events[0].args = (("note", "x" * 70_000),)
    t.events[-1].args = (("k", 7),)  # the last event's: last in the arguments chunk
    data = nt.encode_v4(t)
    back = nt.parse(data)
    assert back.events[0].args == (("note", "x" * 70_000),) and not back.skipped

    def kind_5(body: bytearray) -> bytearray:
        assert body[-2:] == bytes([0, 7])  # the arguments chunk comes last, ("k", 7) last in it
        body[-2] = 5
        return body

    newer = nt.parse(_patched(data, kind_5))
    assert newer.skipped == {"arguments of a kind past 4 (read as integers)": 1}
    assert newer.events[0].args == (("note", "x" * 70_000),) and newer.events[-1].args == (("k", 7),)
    tail = nt.parse(_patched(data, lambda b: b + bytes(10)))
    assert tail.skipped == {"bytes of a short tail (a chunk's header or body cut off)": 10}
    assert tail.events == t.events
    # a warp on a clock with no snapshot: its events have no place; the others are placed
    t.clocks[4] = (3, "%globaltimer of another GPU", 0, 1_000_000_000)
    lone = next(tr for tr in t.tracks.values() if tr.kind == WARP)
    lone.clock = 4
    f = tmp_path / "f.nanotrace"
    f.write_bytes(nt.encode_v4(t))
    raw0, start = 5_000_000_000, 7_000_000 + 50_000  # the kernel's start on the reference clock
    tl = Timeline(host="h", started_ns=10**18, ended_ns=10**18 + 10**9, monotonic_raw_pair=(10**18, raw0))
    tl.kernels.append(
        KernelEvent(7, 10**18 + start - raw0, 10**18 + start - raw0 + 3_000, "gemm_kernel", "gemm_kernel", 0, 1, 1, 1)
    )
    lines = place_all(tl, [Spec(str(f))])
    lost = sum(1 for e in t.events if e.track == lone.id)
    assert f"read past: {lost} events on a clock with no snapshot toward the reference clock" in lines[0], lines
    placed = [e for e in t.events if e.track not in (1, lone.id)]  # under the kernel, on a clock that maps
    assert len(tl.inkernel) == 1 and len(tl.inkernel[0].events) == len(placed), lines


def test_an_unknown_chunk_is_skipped():
    t = sample_trace()
    data = nt.encode_v4(t)
    body = zlib.decompress(data[32:]) + struct.pack("<IIQQ", 99, 0, 5, 1) + b"later"
    assert nt.parse(v4_with_body(body)).events == t.events


def test_read_bounds_the_file(tmp_path):
    f = tmp_path / "t.nanotrace"
    nt.write_v4(sample_trace(), f)
    assert len(nt.read(f).events) == len(sample_trace().events)
    with pytest.raises(nt.NanotraceError, match="No such file"):
        nt.read(tmp_path / "missing.nanotrace")


def test_a_file_costs_at_most_its_budget(tmp_path):
    """Issue 44: a file may cost 128 x its inflated bytes (at least 16 MiB) and at most
    --nanotrace-memory. Files of the smallest records (5-6 byte events, 3-byte
    arguments) read whole under the default; a smaller cap refuses them in one line,
    on the command line too."""
    t = nt.Nanotrace(version=4, session="s", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 10**9)}
    t.tracks[1] = nt.Track(1, 0, 1, "k", KERNEL)
    for w in range(2, 66):
        t.tracks[w] = nt.Track(w, 1, 1, f"warp {w}", WARP, w)
    for i in range(50_000):
        t.events.append(nt.Event(2 + i % 64, 10**12 + i * 37, 20, "mma", args=(("k", i % 7),) * (i % 3)))
    data = nt.encode_v4(t)
    assert nt.parse(data).events == t.events
    with pytest.raises(nt.NanotraceError, match=r"past its memory budget: .*\(--nanotrace-memory 8 MiB\)$"):
        nt.parse(data, "f", memory=8 << 20)
    v1 = v1_file(events_per_lane=12_500)
    assert len(nt.parse(v1).events) == 50_000
    assert "--nanotrace-memory 1 MiB" in one_line_error(v1, memory=1 << 20)
    small = nt.encode_v4(sample_trace())
    assert nt.parse(small).events == sample_trace().events  # the floor: 16 MiB
    f = tmp_path / "t.nanotrace"
    f.write_bytes(v1)
    from gpu_agent.timeline import write_events
    from gpu_agent.timeline.model import KernelEvent, Timeline

    tl = Timeline(host="h", started_ns=1, ended_ns=10**9)
    tl.kernels.append(KernelEvent(7, 1000, 9000, "my_kernel", "my_kernel", 0, 1, 1, 5, grid=(2, 1, 1)))
    write_events(tl, tmp_path / "e.ndjson")
    merge = [sys.executable, "-m", "gpu_agent", "timeline", "merge", str(tmp_path / "e.ndjson"), str(f)]
    out = ["--events", str(tmp_path / "out.ndjson")]
    p = subprocess.run([*merge, *out, "--nanotrace-memory", "1MiB"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "(--nanotrace-memory 1 MiB); not merged" in p.stderr, p.stderr
    p = subprocess.run([*merge, *out], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "50000 events under my_kernel" in p.stderr, p.stderr


def test_a_large_version_1_file_is_read_at_under_220_bytes_an_event(tmp_path):
    """Issue 46: a generated 9.2 M-event sample was refused (MAX_EVENTS was 5 M), and an
    event read took 339 bytes (3.1 GB for the sample), the read's peak 2.7 KB (a buffer
    of MAX_FILE for any file). Events have slots now, and those of a lane that share a
    name and parameters share the name's text and the arguments' tuple: here 189 bytes
    held and 255 at the peak an event, of 20 000 (tracemalloc, deterministic for a given
    input; its worst case, a parameter that differs in every other event), where it was
    359 and 13 KB. The sample itself: docs/benchmarks.md (bench/nanotrace_read.py)."""
    assert nt.model.MAX_EVENTS >= 9_200_000
    path = tmp_path / "big.nanotrace"
    path.write_bytes(v1_file(events_per_lane=5_000))
    tracemalloc.start()
    try:
        t = nt.read(path)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(t.events) == 20_000
    assert held / len(t.events) < 220 and peak / len(t.events) < 300, (held / len(t.events), peak / len(t.events))
