"""What a .nanotrace holds once read (either version), its bounds, and the
bounds-checked reads every version's reader uses."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

MAX_FILE = 256 << 20  # bytes of a file we read at all
MAX_BODY = 1 << 30  # bytes its compressed body may inflate to
MAX_STRING = 1 << 16  # bytes of one string
MAX_EVENTS = 5_000_000  # events of one file (each is a Python object here)
MAX_TRACKS = 1_000_000
MAX_ARGS = 10_000_000
MAX_DEPTH = 64  # track nesting (GPU > stream > kernel > SM > block > warp > lane is 7)
MAX_CLOCK_HOPS = 16  # snapshot edges followed from a clock to the reference clock

V1_MAGIC, V4_MAGIC = b"nanotrace\0", b"NTRACE4\0"
# version 4's track kinds (docs/nanotrace.md), and the ones version 1's tracks become
KERNEL, THREAD_BLOCK, WARP = 4, 6, 7
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


@dataclass
class Event:
    track: int
    start: int  # in its track's clock
    duration: int
    name: str
    kind: int = SLICE
    parent: int = 0  # event id (1-based), 0: none
    correlation: int = 0
    args: list = field(default_factory=list)  # [(name, value)]


@dataclass
class Nanotrace:
    version: int
    session: str = ""
    reference_clock: int = 0
    clocks: dict = field(default_factory=dict)  # id -> (kind, name, device, frequency Hz)
    snapshots: list = field(default_factory=list)  # (source, reference, source ts, reference ts, uncertainty)
    tracks: dict = field(default_factory=dict)  # id -> Track
    events: list = field(default_factory=list)
    # version 1: the one kernel the file holds (its times are offsets from its start)
    kernel: str = ""
    grid: tuple = ()
    cluster: tuple = ()
    # clocks.py's snapshot edges by source clock, built on first use (with the list they came from)
    edges: tuple | None = field(default=None, repr=False, compare=False)

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
