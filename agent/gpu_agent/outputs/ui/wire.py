"""Protobuf's wire format, read only as far as the UI's bounds need: a varint.

The UI counts a pprof's top-level fields before it parses one (profiles.py) and walks a
Perfetto trace a packet at a time (timeline.py), so that a hostile store file is refused
before protobuf builds its objects. Everything else is parsed by protobuf itself."""

from __future__ import annotations


def varint(data: bytes, i: int, error: type[ValueError], what: str) -> tuple[int, int]:
    """The varint at data[i:] and the index after it; error(what) if it runs past the
    end (or past 64 bits)."""
    v = shift = 0
    while i < len(data) and shift < 64:
        b = data[i]
        v |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return v, i
        shift += 7
    raise error(what)
