"""`.nanotrace` files, read and written: in-kernel events (per CTA, per warp) that
kernel authors record from `%globaltimer` with cutedsl-trace or nanotrace-cuda.

Two versions exist, learnt from their public writers and readers:
- version 1, cutedsl-trace's (`b-albar/cutedsl-trace`, its viewer's
  `visualizer/parser.js` at 5db9688): magic `nanotrace\\0`, a version byte, a
  compressed byte, then (zlib when compressed) one kernel: its name, grid and
  cluster, event formats, blocks, and per lane a track of events whose times are
  u32 ns offsets from the kernel's start. No absolute time.
- version 4 (`aikitoria/nanotrace`, `docs/nanotrace.md` at 0cf56be): `NTRACE4\\0`,
  a 32-byte header, one zlib stream of typed chunks (strings, clocks, clock
  snapshots, tracks, varint events, arguments, formats), unknown chunks skipped.

Both read into one model (Nanotrace: tracks and events on clocks). A file is
hostile: its size, its inflated size, every count, string and nesting depth is
bounded, every index checked, and anything wrong raises NanotraceError with one
line that says what and where. write_v4 writes the model back as version 4.
"""

from __future__ import annotations

import os
from pathlib import Path

from .clocks import to_reference
from .model import DEFAULT_MEMORY, MAX_FILE, V1_MAGIC, V4_MAGIC, Event, Nanotrace, NanotraceError, Track
from .v1 import parse_v1
from .v4 import encode_v4, parse_v4, write_v4

__all__ = ["Event", "Nanotrace", "NanotraceError", "Track", "encode_v4", "parse", "read", "to_reference", "write_v4"]


def read(path, memory: int = DEFAULT_MEMORY) -> Nanotrace:
    """A .nanotrace file of version 1 or 4 (NanotraceError: what is wrong), costing at
    most `memory` bytes and MEMORY_PER_BYTE x its inflated bytes (model.py). Under
    sudo only a regular file the invoking user may read (system/safe_open.py)."""
    from ...system.safe_open import open_for_invoker

    path = Path(path)
    try:
        fd, _ = open_for_invoker(str(path))
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size  # (a buffer of MAX_FILE first, whatever the file)
            data = f.read(min(size, MAX_FILE) + 1 if size else MAX_FILE + 1)
    except OSError as e:
        raise NanotraceError(str(e) if not e.strerror else f"{path}: {e.strerror}") from None
    if len(data) > MAX_FILE:
        raise NanotraceError(f"{path}: larger than {MAX_FILE >> 20} MiB")
    return parse(data, str(path), memory)


def parse(data: bytes, what: str = ".nanotrace", memory: int = DEFAULT_MEMORY) -> Nanotrace:
    if data.startswith(V4_MAGIC):
        return parse_v4(data, what, memory)
    if data.startswith(V1_MAGIC):
        return parse_v1(data, what, memory)
    raise NanotraceError(f"{what}: not a .nanotrace file (no nanotrace or NTRACE4 magic)")
