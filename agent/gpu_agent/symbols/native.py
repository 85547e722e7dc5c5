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
import mmap
import os
import struct
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..system import elf as _elf
from ..system import procfs
from .demangle import demangle
from ..system.safe_open import open_regular

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


# --------------------------------------------------------------------------
# ELF parsing


class _SymbolTable:
    """Sorted function symbols of one ELF object, looked up with bisect.

    Why names stay in the string table: PyTorch's CUDA libraries hold 10^5..10^6
    function symbols, and a bytes object per name cost ~140 bytes per symbol
    (the agent peaked at 421 MiB on an H100 node). The table keeps 20 bytes per
    symbol (address, size, name offset) and reads a name from the file's string
    table, mapped read-only, only when an address resolves to it."""

    __slots__ = ("addrs", "sizes", "_offs", "_strtab", "_str_end", "_demangled")

    def __init__(self, entries: Optional[List[Tuple[int, int, bytes, int]]] = None, *,
                 raw: Optional[tuple] = None):
        # entries: (addr, size, raw name, binding), for small tables and tests;
        # raw: (addrs, sizes, name offsets, bindings, string table, its end), as
        # elf.function_symbols gives them.
        if entries is not None:
            strtab = bytearray()
            addrs, sizes, offs, binds = array("Q"), array("Q"), array("Q"), array("B")
            for addr, size, name, bind in entries:
                addrs.append(addr), sizes.append(size), offs.append(len(strtab)), binds.append(bind)
                strtab += name + b"\0"
            raw = (addrs, sizes, offs, binds, bytes(strtab), len(strtab))
        addrs, sizes, offs, binds, self._strtab, self._str_end = raw
        self.addrs, self.sizes, self._offs = array("Q"), array("Q"), array("Q")
        self._demangled: Dict[int, str] = {}
        # One symbol per address (aliases are common: printf/_IO_printf/__printf):
        # prefer a sized one, then GLOBAL over WEAK over LOCAL, then fewer leading
        # underscores, then the shorter name. Names are read for aliases only.
        rank = {1: 0, 2: 1, 0: 2}  # STB_GLOBAL, STB_WEAK, STB_LOCAL
        order = sorted(range(len(addrs)), key=addrs.__getitem__)
        i = 0
        while i < len(order):
            j = i + 1
            while j < len(order) and addrs[order[j]] == addrs[order[i]]:
                j += 1
            best = order[i]
            if j - i > 1:
                def key(k):
                    name = self._name_at(offs[k])
                    return (sizes[k] == 0, rank.get(binds[k], 3),
                            len(name) - len(name.lstrip(b"_")), len(name))
                best = min(order[i:j], key=key)
            self.addrs.append(addrs[best])
            self.sizes.append(sizes[best])
            self._offs.append(offs[best])
            i = j

    def _name_at(self, off: int) -> bytes:
        end = self._strtab.find(b"\0", off, self._str_end)
        return bytes(self._strtab[off:end if end >= 0 else self._str_end])

    def __len__(self) -> int:
        return len(self.addrs)

    def lookup(self, vaddr: int) -> Optional[Tuple[str, str]]:
        """(demangled name, raw name) of the function holding ``vaddr``."""
        i = bisect.bisect_right(self.addrs, vaddr) - 1
        if i < 0:
            return None
        size = self.sizes[i]
        if size and vaddr >= self.addrs[i] + size:
            return None  # past the end of the nearest preceding symbol
        raw = self._name_at(self._offs[i])
        name = self._demangled.get(i)
        if name is None:
            name = demangle(raw)
            self._demangled[i] = name
        return name, raw.decode("utf-8", "replace")


def _open_mapped(path: str, inode: int):
    """path opened for reading if it is a regular file with the mapping's inode
    (0: not known), else None; never blocks (safe_open)."""
    got = open_regular(path)
    if got is None:
        return None
    fd, st = got
    if inode and st.st_ino != inode:
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


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
    out = [Mapping(e.start, e.end, e.offset, e.inode, e.path, e.deleted)
           for e in procfs.parse_maps(text) if "x" in e.perms and e.file_backed]
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
        self._tables: "OrderedDict[object, Optional[_SymbolTable]]" = OrderedDict()
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
            f = _open_mapped(path, ino)
            if f is None:
                continue
            try:
                with f:
                    st = os.fstat(f.fileno())
                    fkey = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                    known = self._idents.get(fkey)
                    if known is not None:  # same file already parsed (another pid)
                        self._idents.move_to_end(fkey)
                        return _ElfInfo(path, known.build_id, known.segments, known.cache_key,
                                        m.path, ino)
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

    def _table(self, info: _ElfInfo) -> Optional[_SymbolTable]:
        key = info.cache_key
        if key in self._tables:
            self._tables.move_to_end(key)
            return self._tables[key]
        table = self._load_table(info)
        self._tables[key] = table
        while len(self._tables) > self._max_tables:
            self._tables.popitem(last=False)
        return table

    def _load_table(self, info: _ElfInfo) -> Optional[_SymbolTable]:
        f = _open_mapped(info.open_path, info.inode)
        if f is None:
            log.debug("cannot read symbols of %s: not the mapped regular file", info.display_path)
            return None
        try:
            with f:
                mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
                elf = ELFFile(f)
                syms = _elf.function_symbols(elf, ".symtab", mm)
                if not syms and info.build_id and len(info.build_id) > 2:
                    dbg = f"/usr/lib/debug/.build-id/{info.build_id[:2]}/{info.build_id[2:]}.debug"
                    g = _open_mapped(dbg, 0)
                    try:
                        if g:
                            gm = mmap.mmap(g.fileno(), 0, prot=mmap.PROT_READ)
                            syms = _elf.function_symbols(ELFFile(g), ".symtab", gm)
                    except (OSError, ELFError, ValueError, struct.error):
                        syms = None
                    finally:
                        if g:
                            g.close()
                if not syms:
                    syms = _elf.function_symbols(elf, ".dynsym", mm)
            if not syms:
                return _SymbolTable([])
            table = _SymbolTable(raw=syms)
            # The symbol section's pages were read once; give them back (the
            # names' pages come back one by one as lookups touch them).
            if hasattr(mmap, "MADV_DONTNEED"):
                syms[4].madvise(mmap.MADV_DONTNEED)
            return table
        except (OSError, ELFError, ValueError, struct.error) as e:
            log.debug("cannot read symbols of %s: %s", info.display_path, e)
            return None


def _unknown_frame(rel: int, path: Optional[str], build_id: Optional[str] = None) -> Frame:
    if path is None:
        return Frame(f"0x{rel:x} [unknown]", "[unknown]", rel, None)
    return Frame(f"0x{rel:x} [{os.path.basename(path)}]", path, rel, build_id)
