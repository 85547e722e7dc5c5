"""Find a process's CPython and compute the ga_py_config the BPF walker needs.

Where the interpreter is: the mapping of a libpython3.X.so, or the main
executable when it carries _PyRuntime itself (a static python). Its symbols
(_PyRuntime, PyCode_Type, Py_Version) come from the file through pyelftools,
moved by the load bias read from /proc/PID/maps.

The version: Py_Version (3.11+), else the file name (libpython3.10.so,
python3.10). The offsets for that version come from offsets.py: a per-version
table for 3.10-3.12, the process's own _Py_DebugOffsets for 3.13 and later.
Either way the result is checked against the live process before the BPF
program may use it: PyCode_Type.tp_members gives the interpreter's own
offsets of co_filename/co_name/co_qualname/co_firstlineno/co_linetable,
tp_basicsize gives where bytecode starts (3.11/3.12), every thread state
found must point back to its interpreter, and the frames of every thread must
lead to code objects. Anything unknown or inconsistent raises
UnsupportedPython: the process keeps native-only stacks.
"""

from __future__ import annotations

import os
import platform
import re
import struct
from dataclasses import dataclass, field
from typing import Optional

from ...probes import contract as C
from ...system import elf as elffile
from ...system import procfs
from ...system.btf import task_offsets
from .debug_offsets import debug_offsets_size, offsets_from_debug
from .offsets import (
    MEMBERDEF_OFFSET,
    MEMBERDEF_SIZE,
    OB_TYPE,
    OWNER_SHIM,
    TP_BASICSIZE,
    TP_MEMBERS,
    UnsupportedPython,
    check_version,
    offsets_from_table,
    walk_flags,
)
from ...system.procmem import ProcMem, ProcMemError


@dataclass
class Interpreter:
    """Where a process's CPython lives."""

    pid: int
    path: str  # the file as the process maps it
    open_path: str  # how we open it (map_files / root)
    bias: int  # runtime address - ELF vaddr
    symbols: dict  # name -> runtime address
    static: bool  # the python executable itself (no libpython)


@dataclass
class Layout:
    """Everything both the BPF walker and the symbolizer need for one process."""

    version: tuple  # (major, minor, micro)
    version_hex: int
    config: C.PyConfig
    # agent-side (symbolizer) offsets
    co_filename: int
    co_name: int  # co_qualname on 3.11+, co_name on 3.10
    co_firstlineno: int
    co_linetable: int
    co_code: int  # bytecode start (3.11+), 0 on 3.10
    str_ascii_size: int  # sizeof(PyASCIIObject)
    str_compact_size: int  # sizeof(PyCompactUnicodeObject)
    str_length: int = 16
    interpreter: Optional[Interpreter] = None
    notes: list = field(default_factory=list)

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))


# ---- finding the interpreter --------------------------------------------------

_LIBPY = re.compile(r"/libpython(\d+)\.(\d+)[a-z]*\.so")
_EXEPY = re.compile(r"/python(\d+)\.(\d+)[a-z]*$")


def _maps(pid: int, proc_root: str = "/proc") -> list[tuple[int, int, int, str]]:
    """(start, end, offset, path) of every file mapping of pid."""
    entries = procfs.read_maps(pid, proc_root)
    if entries is None:
        raise OSError(f"cannot read {proc_root}/{pid}/maps")
    return [(e.start, e.end, e.offset, e.path) for e in entries if e.file_backed]


_ELF_CACHE: dict = {}


def _elf_symbols(path: str, names: tuple) -> tuple[dict, list]:
    """ELF vaddr of each wanted symbol (.dynsym then .symtab) and the PT_LOAD
    segments, cached per file identity."""
    import mmap

    from elftools.elf.elffile import ELFFile

    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, names)
    hit = _ELF_CACHE.get(key)
    if hit is not None:
        return hit
    with open(path, "rb") as f:
        elf = ELFFile(f)
        if elf.elfclass != 64 or not elf.little_endian:
            raise UnsupportedPython(f"{path}: not a 64-bit little-endian ELF")
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            found = elffile.find_symbols(elf, mm, names)
        loads = elffile.load_segments(elf)
    if len(_ELF_CACHE) > 64:
        _ELF_CACHE.clear()
    _ELF_CACHE[key] = (found, loads)
    return found, loads


SYMBOLS = ("_PyRuntime", "PyCode_Type", "Py_Version")


def find_interpreter(pid: int, proc_root: str = "/proc") -> Optional[Interpreter]:
    """The CPython of pid, or None if it has none (a libpython, or a static python)."""
    maps = _maps(pid, proc_root)
    try:
        exe = os.readlink(f"{proc_root}/{pid}/exe")
    except OSError:
        exe = ""
    if exe.endswith(" (deleted)"):
        exe = exe[:-10]
    cands = []
    seen = set()
    for lo, hi, off, path in maps:  # a libpython first: that is where the interpreter is
        if _LIBPY.search(path) and path not in seen:
            seen.add(path)
            cands.append((path, False))
    if exe and exe not in seen:
        cands.append((exe, True))
    for path, static in cands:
        mapping = [(lo, hi, off) for lo, hi, off, p in maps if p == path]
        if not mapping:
            continue
        lo, hi, _ = min(mapping, key=lambda m: m[2])
        open_path = f"{proc_root}/{pid}/map_files/{lo:x}-{hi:x}"
        if not os.path.exists(open_path):
            open_path = f"{proc_root}/{pid}/root{path}"
        try:
            syms, loads = _elf_symbols(open_path, SYMBOLS)
        except Exception:
            continue
        if "_PyRuntime" not in syms or "PyCode_Type" not in syms:
            continue
        bias = elffile.load_bias(loads, [(lo, off) for lo, _hi, off in mapping])
        if bias is None:
            continue
        return Interpreter(pid, path, open_path, bias, {k: v + bias for k, v in syms.items()}, static)
    return None


def _version(interp: Interpreter, mem: ProcMem) -> tuple[tuple, int]:
    if "Py_Version" in interp.symbols:
        hexv = mem.u32(interp.symbols["Py_Version"])
        return ((hexv >> 24) & 0xFF, (hexv >> 16) & 0xFF, (hexv >> 8) & 0xFF), hexv
    m = _LIBPY.search(interp.path) or _EXEPY.search(interp.path)
    if not m:
        raise UnsupportedPython(f"cannot tell the Python version of {interp.path}")
    major, minor = int(m.group(1)), int(m.group(2))
    return (major, minor), (major << 24) | (minor << 16)  # no micro: not known


# ---- the layout ---------------------------------------------------------------


def _code_members(mem: ProcMem, code_type: int) -> dict:
    """PyCode_Type.tp_members: the interpreter's own {name: offset} of co_* fields."""
    out = {}
    arr = mem.u64(code_type + TP_MEMBERS)
    if not arr:
        return out
    for i in range(64):
        ent = mem.read(arr + i * MEMBERDEF_SIZE, MEMBERDEF_SIZE)
        name_p = struct.unpack_from("<Q", ent, 0)[0]
        if not name_p:
            break
        name = mem.read(name_p, 32).split(b"\0", 1)[0].decode("ascii", "replace")
        out[name] = struct.unpack_from("<q", ent, MEMBERDEF_OFFSET)[0]
    return out


def compute_layout(interp: Interpreter, mem: ProcMem, machine: Optional[str] = None) -> Layout:
    """The checked layout of interp's Python; raises UnsupportedPython (NotReady: later)."""
    version, hexv = _version(interp, mem)
    check_version(version)
    rt = interp.symbols["_PyRuntime"]
    code_type = interp.symbols["PyCode_Type"]
    minor = version[1]
    # The interpreter's own offsets of the co_* fields: they pick the right parse
    # of _Py_DebugOffsets (3.13+), and every version's offsets are checked against them.
    members = _code_members(mem, code_type)
    if minor >= 13:
        t = offsets_from_debug(mem.read(rt, debug_offsets_size(minor)), version, hexv, members)
    else:
        t = offsets_from_table(version)
    flags = walk_flags(minor)

    # -- check against the interpreter's own view of code objects --
    want = {
        "co_filename": t["co_filename"],
        "co_name": t["co_name"],
        "co_firstlineno": t["co_firstlineno"],
        "co_linetable": t["co_linetable"],
    }
    if t["co_qualname"] is not None:
        want["co_qualname"] = t["co_qualname"]
    for k, v in want.items():
        if k in members and members[k] != v:
            raise UnsupportedPython(
                f"Python {'.'.join(map(str, version))}: {k} is at {members[k]}, the layout says {v}"
            )
    if not {"co_filename", "co_firstlineno"} <= set(members):
        raise UnsupportedPython("PyCode_Type.tp_members lacks co_filename/co_firstlineno")
    basicsize = mem.u64(code_type + TP_BASICSIZE)
    if minor in (11, 12) and basicsize != t["co_code"]:
        raise UnsupportedPython(
            f"PyCode_Type.tp_basicsize is {basicsize}, the layout says bytecode starts at {t['co_code']}"
        )

    machine = machine or platform.machine()
    fsbase = task_offsets().fsbase if machine in ("x86_64", "AMD64") else None
    pidns_dev = pidns_ino = 0
    if fsbase is not None:
        flags |= C.PYC_MATCH_PTHREAD
    elif not t["ts_native_tid"]:
        raise UnsupportedPython(
            f"Python {'.'.join(map(str, version))}: no way to match threads "
            "here (needs x86_64 with kernel BTF, or Python 3.11+)"
        )
    else:
        try:
            st = os.stat(f"/proc/{interp.pid}/ns/pid")
            if os.stat("/proc/self/ns/pid").st_ino != st.st_ino:
                pidns_dev, pidns_ino = st.st_dev, st.st_ino
        except OSError:
            pass

    fr_fields = [t["fr_previous"], t["fr_code"], t["fr_instr"]]
    fr_size = max(fr_fields) + 8
    if flags & (C.PYC_OWNER | C.PYC_IS_ENTRY):
        fr_size = max(fr_size, t["fr_owner"] + 1)
    co_off = t["co_qualname"] if t["co_qualname"] is not None else t["co_name"]
    co_size = max(t["co_firstlineno"] + 4, co_off + 8, OB_TYPE + 8)
    if fr_size > 256 or co_size > 256 or t["ascii_size"] + 8 > 64:
        raise UnsupportedPython("layout exceeds the BPF walker's read sizes")
    cfg = C.PyConfig(
        runtime=rt,
        code_type=code_type,
        pidns_dev=pidns_dev,
        pidns_ino=pidns_ino,
        task_fsbase=fsbase or 0,
        version=hexv,
        flags=flags,
        rt_interp_head=t["rt_interp_head"],
        interp_next=t["interp_next"],
        interp_threads=t["interp_threads"],
        ts_next=t["ts_next"],
        ts_thread_id=t["ts_thread_id"],
        ts_native_tid=t["ts_native_tid"],
        ts_frame=t["ts_frame"],
        cframe_frame=t["cframe_frame"],
        fr_previous=t["fr_previous"],
        fr_code=t["fr_code"],
        fr_instr=t["fr_instr"],
        fr_owner=t["fr_owner"],
        fr_size=fr_size,
        owner_shim=OWNER_SHIM,
        co_firstlineno=t["co_firstlineno"],
        co_name=co_off,
        co_code=t["co_code"],
        co_size=co_size,
        str_length=t["str_length"],
        str_data=t["ascii_size"],
    )
    layout = Layout(
        version=version,
        version_hex=hexv,
        config=cfg,
        co_filename=t["co_filename"],
        co_name=co_off,
        co_firstlineno=t["co_firstlineno"],
        co_linetable=t["co_linetable"],
        co_code=t["co_code"],
        str_ascii_size=t["ascii_size"],
        str_compact_size=t["compact_size"],
        str_length=t["str_length"],
        interpreter=interp,
    )
    _check_live(layout, mem, t)
    return layout


def _check_live(layout: Layout, mem: ProcMem, t: dict) -> None:
    """The thread list and frames must make sense before BPF may follow them. A
    pointer there that reads nowhere (a frame freed between two reads; one the process
    forged, tests/faults/test_python_frames.py) makes them inconsistent: tried again."""
    try:
        _walk_live(layout, mem, t)
    except ProcMemError as e:
        raise Inconsistent(f"Python {layout.version_str}: a thread or frame pointer reads nowhere ({e})") from None


def _walk_live(layout: Layout, mem: ProcMem, t: dict) -> None:
    cfg = layout.config
    interp = mem.u64(cfg.runtime + cfg.rt_interp_head)
    if not interp:
        raise NotReady("the interpreter is not initialized yet")
    ts = mem.u64(interp + cfg.interp_threads)
    nthreads = 0
    good_frames = 0
    while ts and nthreads < C.PY_MAX_THREADS:
        if mem.u64(ts + t["ts_interp"]) != interp:
            raise Inconsistent(
                f"Python {layout.version_str}: a thread state does not "
                "point back to its interpreter (thread layout differs)"
            )
        nthreads += 1
        frame = mem.u64(ts + cfg.ts_frame)
        if frame and cfg.flags & C.PYC_CFRAME:
            frame = mem.u64(frame + cfg.cframe_frame)
        for _ in range(8):
            if not frame:
                break
            owner = mem.u8(frame + cfg.fr_owner) if cfg.flags & C.PYC_OWNER else 0
            if owner < cfg.owner_shim:
                code = mem.u64(frame + cfg.fr_code) & ~7
                if mem.u64(code + OB_TYPE) != cfg.code_type:
                    raise Inconsistent(
                        f"Python {layout.version_str}: a frame's code is not a code object (frame layout differs)"
                    )
                good_frames += 1
            frame = mem.u64(frame + cfg.fr_previous)
        ts = mem.u64(ts + cfg.ts_next)
    if nthreads == 0:
        raise NotReady("no thread state yet")
    layout.notes.append(f"{nthreads} thread(s), {good_frames} frame(s) checked")


class NotReady(UnsupportedPython):
    """Python is there but not initialized: try again later."""


class Inconsistent(UnsupportedPython):
    """The live threads or frames disagree with the layout. The process runs while
    they are read, so a thread or frame may go between two reads: the caller tries a
    few times before it gives up on the process."""


def probe(pid: int, proc_root: str = "/proc") -> Optional[Layout]:
    """The checked layout of pid's Python; None without Python; raises UnsupportedPython."""
    interp = find_interpreter(pid, proc_root)
    if interp is None:
        return None
    try:
        mem = ProcMem(pid, proc_root)
    except ProcMemError as e:
        raise UnsupportedPython(str(e)) from None
    try:
        return compute_layout(interp, mem)
    except ProcMemError as e:
        raise UnsupportedPython(f"reading pid {pid}: {e}") from None
    finally:
        mem.close()
