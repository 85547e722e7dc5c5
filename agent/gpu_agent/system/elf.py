"""ELF files, read one way for every caller: PT_LOAD segments and the address
translations over them, the GNU build-id, and raw symbol-table scans.

Why one module: the symbolizer (file offset -> ELF vaddr), the USDT attach (vaddr ->
file offset) and the Python layout (a mapping's load bias) each translated
addresses over PT_LOAD segments with their own loop, and two symbol scans parsed
the same tables twice over."""

from __future__ import annotations

import struct
from array import array
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

PAGE = 4096


class LoadSegment(NamedTuple):
    offset: int  # p_offset
    vaddr: int  # p_vaddr
    filesz: int  # p_filesz


def load_segments(elf: ELFFile) -> List[LoadSegment]:
    return [
        LoadSegment(s["p_offset"], s["p_vaddr"], s["p_filesz"]) for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
    ]


def offset_to_vaddr(segments: Sequence[LoadSegment], file_off: int) -> int:
    """The ELF vaddr of a file offset; the offset itself outside every segment."""
    for s in segments:
        if s.offset <= file_off < s.offset + s.filesz:
            return file_off - s.offset + s.vaddr
    return file_off


def vaddr_to_offset(segments: Sequence[LoadSegment], vaddr: int) -> int:
    """The file offset of an ELF vaddr (a USDT site or semaphore)."""
    for s in segments:
        if s.vaddr <= vaddr < s.vaddr + s.filesz:
            return vaddr - s.vaddr + s.offset
    raise ValueError(f"address {vaddr:#x} is in no file-backed PT_LOAD segment")


def load_bias(segments: Sequence[LoadSegment], mappings: Sequence[Tuple[int, int]]) -> Optional[int]:
    """Runtime address minus ELF vaddr, from the (start, file offset) of a file's
    mappings. Segments start page-aligned in the file: the mapping of file
    offset `off` holds vaddr p_vaddr + (off - p_offset)."""
    for start, off in mappings:
        for s in segments:
            if s.offset - (s.offset % PAGE) <= off < s.offset + max(s.filesz, 1):
                return start - (s.vaddr + (off - s.offset))
    return None


def build_id(elf: ELFFile) -> Optional[str]:
    """The GNU build-id in hex, or None."""
    try:
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_NOTE":
                continue
            for note in seg.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    desc = note["n_desc"]
                    return desc if isinstance(desc, str) else bytes(desc).hex()
    except (ELFError, ValueError, struct.error, KeyError):
        return None
    return None


class _Table(NamedTuple):
    fmt: str
    entsize: int
    sym_off: int
    count: int
    str_off: int
    str_end: int


def _table(elf: ELFFile, section_name: str, size: int) -> Optional[_Table]:
    sec = elf.get_section_by_name(section_name)
    if sec is None or sec["sh_type"] == "SHT_NOBITS" or sec["sh_entsize"] == 0:
        return None
    strsec = elf.get_section(sec["sh_link"])
    if strsec is None or strsec["sh_type"] == "SHT_NOBITS":
        return None
    e = "<" if elf.little_endian else ">"
    if elf.elfclass == 64:
        fmt, ent = e + "IBBHQQ", 24  # name, info, other, shndx, value, size
    else:
        fmt, ent = e + "IIIBBH", 16  # name, value, size, info, other, shndx
    str_off, str_end = strsec["sh_offset"], strsec["sh_offset"] + strsec["sh_size"]
    if sec["sh_entsize"] != ent or str_end > size or sec["sh_offset"] > size:
        return None
    count = min(sec["sh_size"], size - sec["sh_offset"]) // ent
    return _Table(fmt, ent, sec["sh_offset"], count, str_off, str_end)


def iter_symbols(elf: ELFFile, section_name: str, buf) -> Iterator[Tuple[int, int, int, int, int]]:
    """(name offset in buf, info, shndx, value, size) of every named symbol of a
    symbol section, parsed raw from `buf` (the whole file: bytes or a read-only
    mmap) without a copy. pyelftools' per-Symbol objects are ~50x slower on the
    10^5..10^6-symbol tables of CUDA/PyTorch libraries."""
    t = _table(elf, section_name, len(buf))
    if t is None:
        return
    is64 = elf.elfclass == 64
    with memoryview(buf)[t.sym_off : t.sym_off + t.count * t.entsize] as data:
        for rec in struct.iter_unpack(t.fmt, data):
            if is64:
                st_name, info, _other, shndx, value, size = rec
            else:
                st_name, value, size, info, _other, shndx = rec
            if st_name and t.str_off + st_name < t.str_end:
                yield t.str_off + st_name, info, shndx, value, size


def strtab_end(elf: ELFFile, section_name: str, size: int) -> int:
    t = _table(elf, section_name, size)
    return t.str_end if t else 0


_FUNC_TYPES = (2, 10)  # STT_FUNC, STT_GNU_IFUNC


def function_symbols(elf: ELFFile, section_name: str, buf) -> Optional[tuple]:
    """The defined function symbols of a section, as arrays: (addrs, sizes, name
    offsets into buf, bindings, buf, the string table's end); None if none."""
    addrs, sizes, offs, binds = array("Q"), array("Q"), array("Q"), array("B")
    for name_off, info, shndx, value, size in iter_symbols(elf, section_name, buf):
        if (info & 0xF) not in _FUNC_TYPES or shndx == 0 or value == 0:
            continue
        addrs.append(value), sizes.append(size), offs.append(name_off), binds.append(info >> 4)
    if not addrs:
        return None
    return addrs, sizes, offs, binds, buf, strtab_end(elf, section_name, len(buf))


def find_symbols(
    elf: ELFFile, buf, names: Sequence[str], sections: Sequence[str] = (".dynsym", ".symtab")
) -> Dict[str, int]:
    """The vaddr of each wanted defined symbol, first section first."""
    want = {n.encode(): n for n in names}
    found: Dict[str, int] = {}
    for sec in sections:
        end = strtab_end(elf, sec, len(buf))
        for name_off, _info, shndx, value, _size in iter_symbols(elf, sec, buf):
            if not value or shndx == 0:
                continue
            stop = buf.find(b"\0", name_off, end)
            n = want.get(bytes(buf[name_off : stop if stop >= 0 else end]))
            if n is not None and n not in found:
                found[n] = value
        if len(found) == len(want):
            break
    return found
