"""Files that processes map, found through /proc and opened once, checked: the
shim's copies (shim_attach.py) and parcagpu's libraries (parcagpu.py) are attached
by the inode a process really maps, never by a path it could swap."""

from __future__ import annotations

import os
from typing import NamedTuple, Optional

from ..system import procfs
from ..system.safe_open import open_regular


def open_mapped_file(proc: str, pid: int, m: "FileMapping") -> Optional[tuple[int, str, set, set]]:
    """The file pid maps at m, opened once and checked (a regular file, the very inode
    mapped): (fd, the path it was opened through, its (dev, ino) ids, the ids of every
    candidate path opened), or None if the process went away. Through
    /proc/PID/root/PATH (the process's mount namespace) or /proc/PID/map_files/RANGE
    when that path does not lead to the mapped inode. Name the file only through the
    fd (/proc/self/fd/N) from then on: the process can swap its path after the check."""
    candidates = []
    if not m.deleted:
        candidates.append(f"{proc}/{pid}/root{m.path}")
    candidates.append(f"{proc}/{pid}/map_files/{m.range}")
    target, ids, fd, seen = None, {m.ident}, -1, set()
    for c in candidates:
        got = open_regular(c)
        if got is None:
            continue
        cfd, st = got
        sid = (st.st_dev, st.st_ino)
        seen.add(sid)
        # map_files/RANGE is the mapped file itself; a path must still name its inode.
        if fd < 0 and (sid == m.ident or c.endswith(m.range)):
            target, fd = c, cfd
            ids.add(sid)
        else:
            os.close(cfd)
    return None if fd < 0 else (fd, target, ids, seen)


class FileMapping(NamedTuple):
    ident: tuple[int, int]  # (st_dev, st_ino) as /proc/PID/maps shows them
    path: str  # in the process's mount namespace
    range: str  # "start-end", the name under /proc/PID/map_files
    deleted: bool


def maps_containing(proc: str, needle: bytes):
    """(pid, its /proc/PID/maps text) of every process whose maps mention needle."""
    try:
        pids = [int(d) for d in os.listdir(proc) if d.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/maps", "rb") as f:
                data = f.read()
        except OSError:
            continue  # gone, or a kernel thread
        if needle in data:
            yield pid, data


def file_mappings(maps: bytes, basename: Optional[str] = None, executable: bool = False) -> list[FileMapping]:
    """The file mappings of a /proc/PID/maps text, one per inode: those of files named
    basename, or, with executable, every executable one."""
    out: dict[tuple[int, int], FileMapping] = {}
    for e in procfs.parse_maps(maps):
        if e.inode == 0 or (basename is not None and os.path.basename(e.path) != basename):
            continue
        if executable and "x" not in e.perms:
            continue
        ident = (e.dev, e.inode)
        if ident not in out:
            out[ident] = FileMapping(ident, e.path, e.range, e.deleted)
    return list(out.values())
