"""/proc/PID/maps, read once and the same way for every caller.

The symbolizer wants executable file mappings, the Python layout wants every
file mapping, and shim discovery wants the shim's mappings with their device
and inode. They all read one parse, so a " (deleted)" path, a path with spaces,
or an anonymous line is handled here once."""

from __future__ import annotations

import os
from typing import List, NamedTuple, Optional

DELETED = " (deleted)"


class MapEntry(NamedTuple):
    start: int
    end: int
    perms: str
    offset: int
    dev: int  # st_dev as os.makedev(major, minor)
    inode: int
    path: str  # without the " (deleted)" suffix; "" for an anonymous mapping
    deleted: bool

    @property
    def range(self) -> str:
        """ "start-end" in hex: the entry's name under /proc/PID/map_files."""
        return f"{self.start:x}-{self.end:x}"

    @property
    def file_backed(self) -> bool:
        return self.path.startswith("/")


def parse_maps(text: str | bytes) -> List[MapEntry]:
    """Every well-formed line of a /proc/PID/maps text, in file order. Bytes are
    decoded with surrogateescape, so that odd path bytes survive a round trip."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        rng, perms, off, dev, inode = parts[:5]
        path = parts[5] if len(parts) > 5 else ""
        deleted = path.endswith(DELETED)
        if deleted:
            path = path[: -len(DELETED)]
        try:
            lo, hi = (int(x, 16) for x in rng.split("-"))
            major, minor = (int(x, 16) for x in dev.split(":"))
            out.append(MapEntry(lo, hi, perms, int(off, 16), os.makedev(major, minor), int(inode), path, deleted))
        except ValueError:
            continue
    return out


def read_maps(pid: int, proc_root: str = "/proc") -> Optional[List[MapEntry]]:
    """parse_maps of the process's maps, or None when it cannot be read (gone)."""
    try:
        with open(f"{proc_root}/{pid}/maps", "rb") as f:
            return parse_maps(f.read())
    except OSError:
        return None


def comm_text(raw: bytes) -> str:
    """A process's name as text: the kernel's comm bytes (any but NUL, which ends
    them; the process chooses them) up to the first NUL, invalid UTF-8 replaced."""
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def read_comm(pid: int) -> str:
    """The process's name as /proc shows it; "?" once it is gone."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return comm_text(f.read(64)).removesuffix("\n")
    except OSError:
        return "?"


def start_ticks(pid: int) -> Optional[int]:
    """When the process started, in clock ticks since boot (/proc/PID/stat's 22nd
    field), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None
