"""One ELF object's function symbols, read once and kept compactly: the table a
native frame's address is looked up in (native.py's Symbolizer caches them)."""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
from array import array
from typing import Dict, List, Optional, Tuple

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..system import elf as _elf
from ..system.safe_open import open_regular
from .demangle import demangle

log = logging.getLogger(__name__)


class SymbolTable:
    """Sorted function symbols of one ELF object, looked up with bisect.

    Why names stay in the string table: PyTorch's CUDA libraries hold 10^5..10^6
    function symbols, and a bytes object per name cost ~140 bytes per symbol
    (the agent peaked at 421 MiB on an H100 node). The table keeps 20 bytes per
    symbol (address, size, name offset) and reads a name from the file's string
    table, mapped read-only, only when an address resolves to it."""

    __slots__ = ("addrs", "sizes", "_offs", "_strtab", "_str_end", "_demangled")

    def __init__(self, entries: Optional[List[Tuple[int, int, bytes, int]]] = None, *, raw: Optional[tuple] = None):
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
                    return (sizes[k] == 0, rank.get(binds[k], 3), len(name) - len(name.lstrip(b"_")), len(name))

                best = min(order[i:j], key=key)
            self.addrs.append(addrs[best])
            self.sizes.append(sizes[best])
            self._offs.append(offs[best])
            i = j

    def _name_at(self, off: int) -> bytes:
        end = self._strtab.find(b"\0", off, self._str_end)
        return bytes(self._strtab[off : end if end >= 0 else self._str_end])

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


def open_mapped(path: str, inode: int):
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


def load_symbols(info) -> Optional[SymbolTable]:
    """The function symbols of one mapped ELF file (native._ElfInfo): .symtab, else its
    debug file's by build-id, else .dynsym; None if it cannot be read."""
    f = open_mapped(info.open_path, info.inode)
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
                g = open_mapped(dbg, 0)
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
            return SymbolTable([])
        table = SymbolTable(raw=syms)
        # The symbol section's pages were read once; give them back (the
        # names' pages come back one by one as lookups touch them).
        if hasattr(mmap, "MADV_DONTNEED"):
            syms[4].madvise(mmap.MADV_DONTNEED)
        return table
    except (OSError, ELFError, ValueError, struct.error) as e:
        log.debug("cannot read symbols of %s: %s", info.display_path, e)
        return None
