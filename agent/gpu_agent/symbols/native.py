"""Native-stack symbolization.

One job: turn ``(pid, [return addresses])`` into human-readable frames (names
are demangled by demangle.py, /proc and ELF are read by procfs.py and elf.py).

* ``Symbolizer.snapshot(pid)`` reads ``/proc/PID/maps`` (executable,
  file-backed mappings) and remembers them, plus the ELF identity (build-id,
  PT_LOAD segments) of every mapped file.  Processes die before their stacks
  are symbolized, so the agent snapshots early (when it first sees a pid) and
  the symbolizer re-snapshots on a miss (an address outside every known
  mapping: a library dlopened after the snapshot).
* ``Symbolizer.symbolize(pid, ips)`` maps each return address to
  ``Frame(function, filename, rel_addr, build_id, line)``.  Every address is a
  return address (from ``_Unwind_GetIP``), so ``ip - 1`` is looked up: it
  lies inside the call instruction, hence inside the calling function even
  when the call is the last instruction of a ``noreturn`` caller.
  ``rel_addr`` is the ELF virtual address (link-time address, what ``nm`` and
  ``addr2line`` use) of ``ip - 1``.
* Runtime address -> file offset (through the mapping) -> ELF vaddr (through
  the PT_LOAD segment holding that offset) -> symbol (``.symtab``, falling
  back to a separate debug file by build-id, then ``.dynsym``).  Works for
  shared objects, PIE and non-PIE executables alike.
* Unknown addresses never raise: they come back as function ``0x<rel_addr>
  [<basename>]`` (or ``0x<ip> [unknown]`` outside every mapping).

Files are opened through ``/proc/PID/root/<path>`` when the process lives in
another mount namespace (containers) and through
``/proc/PID/map_files/<start>-<end>`` when the mapped file was deleted.
Parsed symbol tables are cached per build-id (fallback key: path, size,
mtime) in a bounded LRU.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..system import elf as _elf
from ..system import procfs
from .symtab import SymbolTable, load_symbols, open_mapped

log = logging.getLogger(__name__)

__all__ = ["Frame", "Mapping", "Symbolizer", "parse_maps"]


@dataclass(frozen=True)
class Frame:
    """One symbolized native frame.

    function: demangled function name, or ``0x<rel_addr> [<basename>]``.
    filename: path of the library / binary (as the process sees it), or
        ``[unknown]`` when the address is outside every mapping.
    rel_addr: ELF virtual address of ``ip - 1`` inside ``filename`` (the
        runtime address when no mapping covers it).
    build_id: lowercase hex GNU build-id of ``filename``, or None.
    line: source line (0: unknown; DWARF lines are not resolved yet).
    system_name: the raw (mangled) symbol name, "" when unknown.
    """

    function: str
    filename: str
    rel_addr: int
    build_id: Optional[str]
    line: int = 0
    system_name: str = ""


@dataclass(frozen=True)
class Mapping:
    """One executable file-backed mapping from /proc/PID/maps."""

    start: int
    end: int
    offset: int
    inode: int
    path: str  # without the " (deleted)" suffix
    deleted: bool


class _ElfInfo:
    """Identity and address translation data of one mapped ELF file."""

    __slots__ = ("open_path", "build_id", "segments", "cache_key", "display_path", "inode")

    def __init__(self, open_path, build_id, segments, cache_key, display_path, inode=0):
        self.open_path = open_path
        self.build_id = build_id
        self.segments: List[_elf.LoadSegment] = segments
        self.cache_key = cache_key
        self.display_path = display_path
        self.inode = inode  # the mapping's: the file reopened later must still be it

    def vaddr(self, file_off: int) -> int:
        return _elf.offset_to_vaddr(self.segments, file_off)


# --------------------------------------------------------------------------
# /proc parsing


def parse_maps(text: str) -> List[Mapping]:
    """Executable, file-backed mappings of a /proc/PID/maps text, by address."""
    out = [
        Mapping(e.start, e.end, e.offset, e.inode, e.path, e.deleted)
        for e in procfs.parse_maps(text)
        if "x" in e.perms and e.file_backed
    ]
    out.sort(key=lambda m: m.start)
    return out


def _self_mnt_ns() -> Optional[str]:
    try:
        return os.readlink("/proc/self/ns/mnt")
    except OSError:
        return None


class _ProcState:
    __slots__ = ("maps", "starts", "files", "same_ns", "snap_time", "start_time")

    def __init__(self):
        self.maps: List[Mapping] = []
        self.starts: List[int] = []
        self.files: Dict[Tuple[str, int], _ElfInfo] = {}  # (path, inode) -> info
        self.same_ns = True
        self.snap_time = 0.0
        self.start_time: Optional[int] = None

    def find(self, addr: int) -> Optional[Mapping]:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.maps[i].end:
            return self.maps[i]
        return None


class Symbolizer:
    """Per-process native-address symbolizer with a bounded symbol-table cache.

    Not thread-safe per se; calls are serialized with an internal lock.
    """

    def __init__(
        self,
        max_tables: int = 64,
        max_pids: int = 4096,
        resnapshot_interval_s: float = 1.0,
        proc_root: str = "/proc",
    ):
        self._tables: "OrderedDict[object, Optional[SymbolTable]]" = OrderedDict()
        self._max_tables = max(1, max_tables)
        self._procs: "OrderedDict[int, _ProcState]" = OrderedDict()
        self._max_pids = max(1, max_pids)
        self._resnap_s = resnapshot_interval_s
        self._proc = proc_root
        self._self_ns = _self_mnt_ns()
        # (st_dev, st_ino, size, mtime) -> parsed identity, shared across pids.
        self._idents: "OrderedDict[tuple, _ElfInfo]" = OrderedDict()
        self._max_idents = 8192
        self._lock = threading.RLock()

    # -- process maps ------------------------------------------------------

    def snapshot(self, pid: int) -> bool:
        """Read and keep the executable file mappings of ``pid``.

        Returns False when the process is gone / unreadable (the previous
        snapshot, if any, is kept: its frames still symbolize after exit).
        """
        with self._lock:
            return self._snapshot(pid)

    def _snapshot(self, pid: int) -> bool:
        try:
            with open(f"{self._proc}/{pid}/maps", "r", errors="surrogateescape") as f:
                text = f.read()
        except OSError:
            return False
        maps = parse_maps(text)
        if not maps:
            # An exited process not yet reaped (a zombie) reads as no maps, without an
            # error: gone, and what an earlier snapshot (its attach note's) read stays.
            return False
        old = self._procs.get(pid)
        start_time = procfs.start_ticks(pid)
        st = _ProcState()
        st.start_time = start_time
        if old is not None and (old.start_time == start_time or start_time is None):
            st.files = old.files  # same process: keep already-identified files
        try:
            st.same_ns = os.readlink(f"{self._proc}/{pid}/ns/mnt") == self._self_ns
        except OSError:
            st.same_ns = True
        st.maps = maps
        st.starts = [m.start for m in maps]
        st.snap_time = time.monotonic()
        for m in maps:
            key = (m.path, m.inode)
            if key not in st.files:
                info = self._identify(pid, m, st.same_ns)
                if info is not None:
                    st.files[key] = info
        self._procs[pid] = st
        self._procs.move_to_end(pid)
        while len(self._procs) > self._max_pids:
            self._procs.popitem(last=False)
        return True

    def forget(self, pid: int) -> None:
        """Drop what is known about ``pid`` (after its last stack is symbolized)."""
        with self._lock:
            self._procs.pop(pid, None)

    def known_pids(self) -> List[int]:
        with self._lock:
            return list(self._procs)

    def _candidates(self, pid: int, m: Mapping, same_ns: bool) -> List[str]:
        cands = []
        if m.deleted:
            cands.append(f"{self._proc}/{pid}/map_files/{m.start:x}-{m.end:x}")
        if same_ns:
            cands.append(m.path)
        else:
            cands.append(f"{self._proc}/{pid}/root{m.path}")
        if not m.deleted:
            cands.append(f"{self._proc}/{pid}/map_files/{m.start:x}-{m.end:x}")
        return cands

    def _identify(self, pid: int, m: Mapping, same_ns: bool) -> Optional[_ElfInfo]:
        for path in self._candidates(pid, m, same_ns):
            # Never a FIFO; never another file where the inode can be trusted (an
            # overlayfs root can show another inode number for the same file).
            ino = 0 if path.startswith(f"{self._proc}/{pid}/root/") else m.inode
            f = open_mapped(path, ino)
            if f is None:
                continue
            try:
                with f:
                    st = os.fstat(f.fileno())
                    fkey = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                    known = self._idents.get(fkey)
                    if known is not None:  # same file already parsed (another pid)
                        self._idents.move_to_end(fkey)
                        return _ElfInfo(path, known.build_id, known.segments, known.cache_key, m.path, ino)
                    elf = ELFFile(f)
                    segs = _elf.load_segments(elf)
                    bid = _elf.build_id(elf)
            except (OSError, ELFError, ValueError, struct.error):
                continue
            key = ("bid", bid) if bid else ("file", m.path, st.st_size, st.st_mtime_ns)
            info = _ElfInfo(path, bid, segs, key, m.path, ino)
            self._idents[fkey] = info
            while len(self._idents) > self._max_idents:
                self._idents.popitem(last=False)
            return info
        return None

    # -- symbolization -----------------------------------------------------

    def symbolize(self, pid: int, ips: Sequence[int]) -> List[Frame]:
        """Symbolize return addresses (innermost first) of process ``pid``.

        Never raises; one Frame per input address, in the same order.
        """
        with self._lock:
            try:
                return self._symbolize(pid, ips)
            except Exception:  # defensive: symbolization must never kill the agent
                log.exception("symbolize(%d) failed", pid)
                return [_unknown_frame(max(ip - 1, 0), None) for ip in ips]

    def _symbolize(self, pid: int, ips: Sequence[int]) -> List[Frame]:
        st = self._procs.get(pid)
        if st is None:
            self._snapshot(pid)
            st = self._procs.get(pid)
        elif any(st.find(max(ip - 1, 0)) is None for ip in ips):
            if time.monotonic() - st.snap_time >= self._resnap_s:
                self._snapshot(pid)  # miss: maybe a library dlopened later
                st = self._procs.get(pid)
        out = []
        for ip in ips:
            addr = max(ip - 1, 0)
            m = st.find(addr) if st is not None else None
            if m is None:
                out.append(_unknown_frame(addr, None))
                continue
            info = st.files.get((m.path, m.inode))
            file_off = addr - m.start + m.offset
            if info is None:
                out.append(_unknown_frame(file_off, m.path, None))
                continue
            rel = info.vaddr(file_off)
            table = self._table(info)
            hit = table.lookup(rel) if table is not None else None
            if hit is None:
                out.append(_unknown_frame(rel, m.path, info.build_id))
            else:
                out.append(Frame(hit[0], m.path, rel, info.build_id, 0, hit[1]))
        return out

    def _table(self, info: _ElfInfo) -> Optional[SymbolTable]:
        key = info.cache_key
        if key in self._tables:
            self._tables.move_to_end(key)
            return self._tables[key]
        table = load_symbols(info)
        self._tables[key] = table
        while len(self._tables) > self._max_tables:
            self._tables.popitem(last=False)
        return table


def _unknown_frame(rel: int, path: Optional[str], build_id: Optional[str] = None) -> Frame:
    if path is None:
        return Frame(f"0x{rel:x} [unknown]", "[unknown]", rel, None)
    return Frame(f"0x{rel:x} [{os.path.basename(path)}]", path, rel, build_id)
