"""What a .nanotrace holds once read (either version), its bounds, and the
bounds-checked reads every version's reader uses."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Sequence

MAX_FILE = 256 << 20  # bytes of a file we read at all
MAX_BODY = 1 << 30  # bytes its compressed body may inflate to
# bytes of one string: the writer writes a 70 000-byte argument, and upstream reads it
# (the file's budget bounds what its strings cost in all)
MAX_STRING = 16 << 20
MAX_EVENTS = 20_000_000  # events of one file (each a Python object here, about 200 bytes read)
MAX_TRACKS = 1_000_000
MAX_ARGS = 10_000_000
MAX_DEPTH = 64  # track nesting (GPU > stream > kernel > SM > block > warp > lane is 7)
MAX_CLOCK_HOPS = 16  # snapshot edges followed from a clock to the reference clock

# What one file may cost (issue 44): its inflated body, the objects it becomes once read
# and placed, and the strings its records name (held once, spelt out at each reference
# by every trace and NDJSON written from it), at most MEMORY_PER_BYTE times its inflated
# bytes (at least MEMORY_FLOOR) and at most the cap (`--nanotrace-memory`, default
# DEFAULT_MEMORY). Each record is charged before it is built, at about what it was
# measured to take (Python 3.11, tracemalloc, read and placed): an event 460 bytes, an
# argument 130, so a file of the smallest records (5-byte events, 3-byte arguments:
# 102 and 53 bytes a byte, charged) still fits.
MEMORY_PER_BYTE = 128
MEMORY_FLOOR = 16 << 20  # a small file's few long names: 16 MiB whatever its size
DEFAULT_MEMORY = 8 << 30
COST_EVENT = 512  # its tuple as read, its Event, its args list, its placed InKernelEvent
COST_ARG = 160  # its tuple as read, its (name, value) and the placed copy's slot
COST_TRACK = 320
COST_RECORD = 128  # a string's slot, a clock, a snapshot, a format, a version 1 block

V1_MAGIC, V4_MAGIC = b"nanotrace\0", b"NTRACE4\0"
# version 4's track kinds (docs/nanotrace.md), and the ones version 1's tracks become
KERNEL, THREAD_BLOCK, WARP, GENERIC = 4, 6, 7, 8
SLICE = 0
CH_SESSION, CH_STRINGS, CH_CLOCKS, CH_SNAPSHOTS, CH_TRACKS, CH_EVENTS, CH_ARGS, CH_FORMATS = range(1, 9)


class NanotraceError(ValueError):
    """A file that is not a .nanotrace we can read, in one line."""


@dataclass
class Track:
    id: int
    parent: int  # 0: none
    clock: int
    name: str
    kind: int
    source_id: int = 0  # a block's linear id, a lane's id, a stream's id...
    order: int = 0


@dataclass(slots=True)
class Event:
    """One event (slots: a file may hold millions; version 1's events of a lane that
    share a name and parameters share their name's text and their arguments' tuple)."""

    track: int
    start: int  # in its track's clock
    duration: int
    name: str
    kind: int = SLICE
    parent: int = 0  # event id (1-based), 0: none
    correlation: int = 0
    args: Sequence = ()  # (name, value) pairs: a bool is version 4's Boolean kind
    colour: int = 0  # version 4's event colour (0: none), kept for a written file


@dataclass
class Nanotrace:
    version: int
    session: str = ""
    reference_clock: int = 0
    clocks: dict = field(default_factory=dict)  # id -> (kind, name (text), device, frequency Hz)
    snapshots: list = field(default_factory=list)  # (source, reference, source ts, reference ts, uncertainty)
    tracks: dict = field(default_factory=dict)  # id -> Track
    events: list = field(default_factory=list)
    # version 4's format records: an event name -> (its tooltip template, its flags byte),
    # kept for a written file (the viewer fills the templates in)
    formats: dict = field(default_factory=dict)
    # version 1: the one kernel the file holds (its times are offsets from its start)
    kernel: str = ""
    grid: tuple = ()
    cluster: tuple = ()
    # clocks.py's snapshot edges by source clock, built on first use (with the list they came from)
    edges: tuple | None = field(default=None, repr=False, compare=False)
    # what reading (and placing) carried on past where upstream's viewer carries on too,
    # counted: {what: how many}; said in the file's line (inkernel.place_all)
    skipped: dict = field(default_factory=dict, repr=False, compare=False)

    def skip(self, what: str, n: int = 1) -> None:
        self.skipped[what] = self.skipped.get(what, 0) + n

    def skipped_text(self) -> str:
        """'; read past: 3 events on a track the file lacks, ...' ('' if nothing)."""
        if not self.skipped:
            return ""
        return "; read past: " + ", ".join(f"{n} {what}" for what, n in sorted(self.skipped.items()))

    @property
    def absolute(self) -> bool:
        """Whether its times map onto a clock of the host (version 4 with snapshots)."""
        return self.version >= 4 and bool(self.snapshots)


class Reader:
    """Bounds-checked little-endian reads over bytes; `what` names the place for errors."""

    def __init__(self, data: bytes, what: str):
        self.data, self.pos, self.what = memoryview(data), 0, what

    def need(self, n: int) -> int:
        if n < 0 or self.pos + n > len(self.data):
            raise NanotraceError(f"{self.what}: truncated at byte {self.pos} (wanted {n} more)")
        p = self.pos
        self.pos += n
        return p

    def unpack(self, fmt: str):
        p = self.need(struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.data, p)

    def view(self, n: int) -> memoryview:
        p = self.need(n)
        return self.data[p : p + n]

    def bytes(self, n: int) -> bytes:
        p = self.need(n)
        return bytes(self.data[p : p + n])

    def text(self, n: int) -> str:
        if n > MAX_STRING:
            raise NanotraceError(f"{self.what}: a string of {n} bytes at byte {self.pos} (at most {MAX_STRING})")
        try:
            return self.bytes(n).decode("utf-8")
        except UnicodeDecodeError:
            raise NanotraceError(f"{self.what}: a string that is not UTF-8 at byte {self.pos - n}") from None

    def varuint(self) -> int:
        v = shift = 0
        while True:
            b = self.data[self.need(1)]
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
            shift += 7
            if shift > 63:
                raise NanotraceError(f"{self.what}: a varint longer than 64 bits at byte {self.pos}")

    def zigzag(self) -> int:
        v = self.varuint()
        return (v >> 1) ^ -(v & 1)

    def left(self) -> int:
        return len(self.data) - self.pos


def inflate(body: bytes, limit: int, what: str) -> bytes:
    """One zlib stream, inflated to at most `limit` bytes: a bomb stops there."""
    d = zlib.decompressobj()
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as e:
        raise NanotraceError(f"{what}: its zlib stream is corrupt ({e})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise NanotraceError(f"{what}: inflates past {limit} bytes")
    if not d.eof or d.unused_data:
        raise NanotraceError(f"{what}: its zlib stream is truncated or followed by other bytes")
    return out


class Budget:
    """What a file's read has cost so far (bytes, estimated as above), against
    MEMORY_PER_BYTE x its inflated bytes (at least MEMORY_FLOOR; once known) and the cap."""

    def __init__(self, what: str, cap: int = DEFAULT_MEMORY):
        self.what, self.cap, self.limit, self.used, self.size = what, cap, cap, 0, None

    def inflated(self, n: int) -> None:
        """The body's size, once known: it counts too, and sets the limit."""
        self.size, self.limit = n, min(self.cap, max(MEMORY_PER_BYTE * n, MEMORY_FLOOR))
        self.charge(n, "its inflated body")

    def charge(self, n: int, for_what: str) -> None:
        self.used += n
        if self.used > self.limit:
            if self.limit == self.cap:
                why = f"--nanotrace-memory {self.cap / 2**20:g} MiB"
            elif self.limit == MEMORY_FLOOR:
                why = "a small file's floor"
            else:
                why = f"{MEMORY_PER_BYTE} x its {self.size} inflated bytes"
            raise NanotraceError(
                f"{self.what}: {for_what} would take it past its memory budget: about {self.used / 2**20:.1f} MiB, "
                f"at most {self.limit / 2**20:.1f} MiB ({why})"
            )


class Stream:
    """Reads as Reader does, over a body inflated a piece at a time: a file's counts
    and bounds can be checked before it is inflated whole. Holds a piece and what is
    left of the one before it."""

    PIECE = 1 << 20

    def __init__(self, data, compressed: bool, limit: int, what: str):
        self.what, self.limit, self.base, self.pos = what, limit, 0, 0
        if compressed:
            self.d, self.src, self.buf = zlib.decompressobj(), memoryview(data), b""
        else:
            self.d, self.src, self.buf = None, b"", memoryview(data)

    def _more(self) -> bool:
        while self.d is not None and not self.d.eof and len(self.src):
            before = len(self.src)
            try:
                out = self.d.decompress(self.src, self.PIECE)
            except zlib.error as e:
                raise NanotraceError(f"{self.what}: its zlib stream is corrupt ({e})") from None
            self.src = self.d.unconsumed_tail
            if out:
                self.base += self.pos
                self.buf, self.pos = bytes(self.buf[self.pos :]) + out, 0
                if self.base + len(self.buf) > self.limit:
                    raise NanotraceError(f"{self.what}: inflates past {self.limit} bytes")
                return True
            if len(self.src) == before:
                break
        return False

    def need(self, n: int) -> int:
        while len(self.buf) - self.pos < n:
            if not self._more():
                raise NanotraceError(f"{self.what}: truncated at byte {self.base + self.pos} (wanted {n} more)")
        p = self.pos
        self.pos += n
        return p

    def unpack(self, fmt: struct.Struct) -> tuple:
        p = self.need(fmt.size)  # (first: it may replace the buffer)
        return fmt.unpack_from(self.buf, p)

    def skip(self, n: int) -> None:
        while n > self.PIECE:
            self.need(self.PIECE)
            n -= self.PIECE
        self.need(n)

    def size(self) -> int:
        """The body's whole size (what is left inflated, a piece at a time, and dropped)."""
        while self._more():
            pass
        return self.base + len(self.buf)
