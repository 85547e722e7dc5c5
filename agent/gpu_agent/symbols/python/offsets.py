"""Where CPython keeps what the BPF walker and the symbolizer read, version by version.

Pure knowledge of CPython's structures, no process involved (layout.py finds the
interpreter in a process, reads it and checks the result against it):
  * 3.10-3.12: a per-version table (offsetof() against the release headers;
    see tests/test_python_layout.py);
  * 3.13 and later: _Py_DebugOffsets, which CPython puts at offset 0 of
    _PyRuntime for out-of-process tools (cookie "xdebugpy"); its bytes, read
    from the process, are parsed here. Free-threaded builds are refused.
Both give the same dict of offsets (offsets_from_table here, and
debug_offsets.offsets_from_debug), and walk_flags says how the walker goes from
one frame to the next.
"""

from __future__ import annotations

from ...probes import contract as C

MIN_VERSION = (3, 10)
# PyTypeObject (default build, 3.10-3.14): tp_basicsize @32, tp_members @240.
TP_BASICSIZE = 32
TP_MEMBERS = 240
MEMBERDEF_SIZE = 40  # struct PyMemberDef {name, type, offset, flags, doc}
MEMBERDEF_OFFSET = 16
OB_TYPE = 8
OB_SIZE = 16  # PyVarObject.ob_size
BYTES_SVAL = 32  # PyBytesObject.ob_sval
STR_STATE = 32  # PyASCIIObject.state


class UnsupportedPython(Exception):
    """This process's Python cannot be unwound (its stacks stay native-only).

    Defined here, not in layout.py, because a version or a _Py_DebugOffsets
    this module cannot read is already a reason; layout.py adds its own."""


# ---- 3.10-3.12: offsetof() against pyenv's 3.10.13, 3.11.7, 3.12.1 headers ----
# (the tests recompile these against every installed version's headers)
_TABLE = {
    (3, 10): dict(
        rt_interp_head=32,
        interp_next=0,
        interp_threads=8,
        ts_next=8,
        ts_interp=16,
        ts_thread_id=176,
        ts_native_tid=0,
        ts_frame=24,
        cframe_frame=0,
        fr_previous=24,
        fr_code=32,
        fr_instr=96,
        fr_owner=0,
        co_filename=104,
        co_name=112,
        co_qualname=None,
        co_firstlineno=40,
        co_linetable=120,
        co_code=0,
        ascii_size=48,
        compact_size=72,
    ),
    (3, 11): dict(
        rt_interp_head=40,
        interp_next=0,
        interp_threads=16,
        ts_next=8,
        ts_interp=16,
        ts_thread_id=152,
        ts_native_tid=160,
        ts_frame=56,
        cframe_frame=8,
        fr_previous=48,
        fr_code=32,
        fr_instr=56,
        fr_owner=68,  # is_entry
        co_filename=112,
        co_name=120,
        co_qualname=128,
        co_firstlineno=72,
        co_linetable=136,
        co_code=184,
        ascii_size=48,
        compact_size=72,
    ),
    (3, 12): dict(
        rt_interp_head=40,
        interp_next=0,
        interp_threads=72,
        ts_next=8,
        ts_interp=16,
        ts_thread_id=136,
        ts_native_tid=144,
        ts_frame=56,
        cframe_frame=0,
        fr_previous=8,
        fr_code=0,
        fr_instr=56,
        fr_owner=70,
        co_filename=112,
        co_name=120,
        co_qualname=128,
        co_firstlineno=68,
        co_linetable=136,
        co_code=192,
        ascii_size=40,
        compact_size=56,
    ),
}
# First owner value that is not a Python frame: FRAME_OWNED_BY_CSTACK (3) on
# 3.12/3.13; 3.14 inserted FRAME_OWNED_BY_INTERPRETER (3) before CSTACK (4).
OWNER_SHIM = 3

# ---- one dict of offsets, whichever the source ----------------------------------


def version_str(version: tuple) -> str:
    return ".".join(map(str, version))


def check_version(version: tuple) -> None:
    """Refuse what neither source covers: another major version, 3.x before MIN_VERSION."""
    if version[0] != 3 or version[:2] < MIN_VERSION:
        raise UnsupportedPython(f"Python {version_str(version)}: Python stacks need CPython 3.10 or later")


def offsets_from_table(version: tuple) -> dict:
    """3.10-3.12: the offsets of that release (the table's keys, plus str_length)."""
    if version[:2] not in _TABLE:
        raise UnsupportedPython(f"Python {version_str(version)}: no layout known")
    t = dict(_TABLE[version[:2]])
    t["str_length"] = 16
    return t


def walk_flags(minor: int) -> int:
    """The ga_py_config flags that tell the BPF walker how this version's frames
    link (bpf/python_stack.h): 3.10 walks frame objects (each its own eval-loop
    call, f_lasti); 3.11 reaches the frame through the thread's CFrame, is_entry
    marks where an eval-loop call starts; 3.12 likewise through the CFrame, the
    frame's owner byte marks the C-stack frames instead; 3.13+ reads the owner
    too, and the thread state points at the frame itself."""
    if minor >= 13:
        return C.PYC_OWNER
    if minor == 10:
        return C.PYC_FRAMEOBJ
    if minor == 11:
        return C.PYC_CFRAME | C.PYC_IS_ENTRY
    return C.PYC_CFRAME | C.PYC_OWNER
