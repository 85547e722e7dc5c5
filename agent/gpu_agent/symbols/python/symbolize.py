"""Name Python frames: (code object address, stamp, instruction offset) -> qualname, file, line.

Everything is read from the process's memory (/proc/PID/mem): the code
object's co_qualname (co_name on 3.10), co_filename, co_firstlineno and
co_linetable, decoded here. Results are cached per process under (code
address, stamp), the stamp being what BPF took of the code object at the
sample (contract.py_stamp): a code object freed and reallocated at the same
address for another function has another stamp, so it is never served the old
name, and a frame whose code object is already gone when the agent reads it
(memory no longer has the sample's stamp) gets a placeholder name instead of
the new occupant's. What memory holds is cached under its own stamp, so a
function that comes back to the same address later is named from the cache.
"""

from __future__ import annotations

import logging
import bisect
import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from ...probes import contract as C
from .layout import Layout
from .offsets import BYTES_SVAL, OB_SIZE, OB_TYPE, STR_STATE
from ...system.procmem import ProcMem, ProcMemError

MAX_STR = 4096  # characters of a name or file name
MAX_LINETABLE = 1 << 20
UNKNOWN_FILE = "<unknown>"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PyFrameInfo:
    function: str
    filename: str
    line: int
    entry: bool = False  # outermost frame of one eval-loop call
    known: bool = True  # False: the code object could not be named


class _Code:
    __slots__ = ("stamp", "name", "filename", "firstlineno", "ranges", "lines")

    def __init__(self, stamp, name, filename, firstlineno, ranges):
        self.stamp = stamp
        self.name = name
        self.filename = filename
        self.firstlineno = firstlineno
        self.ranges = ranges  # [(start_byte, end_byte, line or None)], sorted
        self.lines: dict = {}

    def line(self, instr: int) -> int:
        """Line of the instruction at byte offset instr; the def line if it has none."""
        got = self.lines.get(instr)
        if got is None:
            got = line_for(self.ranges, instr)
            if got is None or got <= 0:
                got = self.firstlineno
            if len(self.lines) < 4096:
                self.lines[instr] = got
        return got


def line_for(ranges: list, instr: int) -> Optional[int]:
    """The line of byte offset instr in decoded ranges; None if none covers it."""
    if instr == C.PY_NO_INSTR:
        return None
    i = bisect.bisect_right(ranges, (instr, 1 << 62, 1 << 62)) - 1
    if i >= 0:
        start, end, line = ranges[i]
        if start <= instr < end:
            return line
    return None


# ---- line tables ----------------------------------------------------------------


def linetable_310(table: bytes, firstlineno: int) -> list:
    """3.10 co_linetable (PEP 626): (bytecode delta u8, line delta s8) pairs; -128 = no line."""
    out = []
    addr, line = 0, firstlineno
    for i in range(0, len(table) - 1, 2):
        sdelta = table[i]
        ldelta = table[i + 1] - 256 if table[i + 1] > 127 else table[i + 1]
        end = addr + sdelta
        if ldelta == -128:
            cur = None
        else:
            line += ldelta
            cur = line
        if end > addr:
            out.append((addr, end, cur))
        addr = end
    return out


def _varint(table: bytes, pos: int) -> tuple[int, int]:
    b = table[pos]
    pos += 1
    val = b & 63
    shift = 6
    while b & 64:
        b = table[pos]
        pos += 1
        val |= (b & 63) << shift
        shift += 6
    return val, pos


def _svarint(table: bytes, pos: int) -> tuple[int, int]:
    u, pos = _varint(table, pos)
    return (-(u >> 1) if u & 1 else u >> 1), pos


def linetable_311(table: bytes, firstlineno: int) -> list:
    """3.11+ location table (CPython Objects/locations.md); addresses in bytes."""
    out = []
    addr, line = 0, firstlineno
    pos, n = 0, len(table)
    while pos < n:
        first = table[pos]
        pos += 1
        if not first & 0x80:
            break  # out of sync: stop rather than guess
        code = (first >> 3) & 15
        length = ((first & 7) + 1) * 2
        cur: Optional[int]
        if code == 15:  # no location
            cur = None
        elif code == 14:  # long form
            d, pos = _svarint(table, pos)
            line += d
            cur = line
            _, pos = _varint(table, pos)  # end line delta
            _, pos = _varint(table, pos)  # column + 1
            _, pos = _varint(table, pos)  # end column + 1
        elif code == 13:  # no column
            d, pos = _svarint(table, pos)
            line += d
            cur = line
        elif code in (10, 11, 12):  # one line, line delta code - 10, two column bytes
            line += code - 10
            cur = line
            pos += 2
        else:  # short form, same line, one column byte
            cur = line
            pos += 1
        out.append((addr, addr + length, cur))
        addr += length
    return out


# ---- the symbolizer -------------------------------------------------------------


class PySymbolizer:
    """Names the Python frames of one process (one Layout)."""

    def __init__(self, pid: int, layout: Layout, mem: Optional[ProcMem] = None, max_codes: int = 65536):
        self.pid = pid
        self.layout = layout
        self._mem = mem
        self._codes: "OrderedDict[tuple[int, int], _Code]" = OrderedDict()
        self._max = max_codes
        self.stats = {"hits": 0, "reads": 0, "stale": 0, "errors": 0}
        if self._mem is None:
            # Open the process's memory now, at set-up, while it surely exists: frames
            # are named later, and a process that has gone by then reads as unknown.
            try:
                self._mem = ProcMem(pid)
            except ProcMemError as e:
                log.debug("pid %d: %s", pid, e)

    def close(self) -> None:
        if self._mem is not None:
            self._mem.close()
            self._mem = None

    def _memory(self) -> ProcMem:
        if self._mem is None:
            self._mem = ProcMem(self.pid)
        return self._mem

    def frame(self, code: int, stamp: int, instr: int, entry: bool = False) -> PyFrameInfo:
        c = self._codes.get((code, stamp))
        if c is not None:
            self.stats["hits"] += 1
            self._codes.move_to_end((code, stamp))
        else:
            try:
                c = self._read(code)
            except (ProcMemError, ValueError, IndexError, struct.error, UnicodeError) as e:
                self.stats["errors"] += 1
                if self.stats["errors"] <= 3:
                    log.debug("pid %d code %#x: %s", self.pid, code, e)
                c = None
            if c is not None:
                self._codes[(code, c.stamp)] = c  # under the stamp memory has now
                self._codes.move_to_end((code, c.stamp))
                while len(self._codes) > self._max:
                    self._codes.popitem(last=False)
            if c is None or c.stamp != stamp:
                # Gone since the sample (freed, maybe reused): never borrow a name.
                self.stats["stale"] += 1
                if self.stats["stale"] <= 5:
                    log.debug(
                        "pid %d code %#x: %s",
                        self.pid,
                        code,
                        "unreadable or not a code object"
                        if c is None
                        else f"stamp {c.stamp:#x} in memory, {stamp:#x} at the sample ({c.name})",
                    )
                return PyFrameInfo(f"<python code {code:#x}>", UNKNOWN_FILE, 0, entry, False)
        return PyFrameInfo(c.name, c.filename, c.line(instr), entry)

    # -- reading ----------------------------------------------------------------
    def _read(self, code: int) -> Optional[_Code]:
        L, mem = self.layout, self._memory()
        self.stats["reads"] += 1
        if mem.u64(code + OB_TYPE) != L.config.code_type:
            return None
        firstlineno = mem.i32(code + L.co_firstlineno)
        name_p = mem.u64(code + L.co_name)
        file_p = mem.u64(code + L.co_filename)
        lt_p = mem.u64(code + L.co_linetable)
        # The stamp exactly as BPF takes it (raw words, whatever the string kind).
        raw = mem.read(name_p, L.str_ascii_size + 8)
        name_len = struct.unpack_from("<Q", raw, L.str_length)[0]
        name8 = struct.unpack_from("<Q", raw, L.str_ascii_size)[0]
        stamp = C.py_stamp(name8, name_len, firstlineno)
        name = self._str(name_p) or "<unknown>"
        filename = self._str(file_p) or UNKNOWN_FILE
        table = self._bytes(lt_p)
        if self.layout.version[:2] == (3, 10):
            ranges = linetable_310(table, firstlineno)
        else:
            ranges = linetable_311(table, firstlineno)
        return _Code(stamp, name, filename, firstlineno, ranges)

    def _str(self, p: int) -> Optional[str]:
        if not p:
            return None
        L, mem = self.layout, self._memory()
        hdr = mem.read(p, L.str_ascii_size)
        length = struct.unpack_from("<q", hdr, L.str_length)[0]
        state = struct.unpack_from("<I", hdr, STR_STATE)[0]
        kind = (state >> 2) & 7
        compact = (state >> 5) & 1
        ascii_ = (state >> 6) & 1
        if length < 0 or kind not in (1, 2, 4):
            return None
        length = min(length, MAX_STR)
        if compact and ascii_:
            data = L.str_ascii_size
        elif compact:
            data = L.str_compact_size
        else:
            data_p = mem.u64(p + L.str_compact_size)
            raw = mem.read(data_p, length * kind)
            return _decode(raw, kind)
        return _decode(mem.read(p + data, length * kind), kind)

    def _bytes(self, p: int) -> bytes:
        if not p:
            return b""
        mem = self._memory()
        n = mem.u64(p + OB_SIZE)
        if n > MAX_LINETABLE:
            return b""
        return mem.read(p + BYTES_SVAL, n) if n else b""


def _decode(raw: bytes, kind: int) -> str:
    if kind == 1:
        return raw.decode("latin-1")
    if kind == 2:
        return raw.decode("utf-16-le", "replace")
    return raw.decode("utf-32-le", "replace")
