"""CPython 3.13+'s _Py_DebugOffsets: the table CPython keeps at offset 0 of
_PyRuntime for out-of-process tools (cookie "xdebugpy"), its layout version by
version, and its bytes (read from the process by layout.py) parsed into the same
dict of offsets as offsets.py's per-version table. A parse is used only when the
live interpreter agrees with it (_plausible). Free-threaded builds are refused."""

from __future__ import annotations

import struct

from .offsets import OB_TYPE, UnsupportedPython, version_str

# ---- _Py_DebugOffsets (3.13+): sections of u64 fields, in declaration order ----
_DEBUG_313 = [
    ("runtime_state", ["size", "finalizing", "interpreters_head"]),
    (
        "interpreter_state",
        [
            "size",
            "id",
            "next",
            "threads_head",
            "gc",
            "imports_modules",
            "sysdict",
            "builtins",
            "ceval_gil",
            "gil_runtime_state",
            "gil_runtime_state_enabled",
            "gil_runtime_state_locked",
            "gil_runtime_state_holder",
        ],
    ),
    (
        "thread_state",
        [
            "size",
            "prev",
            "next",
            "interp",
            "current_frame",
            "thread_id",
            "native_thread_id",
            "datastack_chunk",
            "status",
        ],
    ),
    ("interpreter_frame", ["size", "previous", "executable", "instr_ptr", "localsplus", "owner"]),
    (
        "code_object",
        [
            "size",
            "filename",
            "name",
            "qualname",
            "linetable",
            "firstlineno",
            "argcount",
            "localsplusnames",
            "localspluskinds",
            "co_code_adaptive",
        ],
    ),
    ("pyobject", ["size", "ob_type"]),
    ("type_object", ["size", "tp_name", "tp_repr", "tp_flags"]),
    ("tuple_object", ["size", "ob_item", "ob_size"]),
    ("list_object", ["size", "ob_item", "ob_size"]),
    ("dict_object", ["size", "ma_keys", "ma_values"]),
    ("float_object", ["size", "ob_fval"]),
    ("long_object", ["size", "lv_tag", "ob_digit"]),
    ("bytes_object", ["size", "ob_size", "ob_sval"]),
    ("unicode_object", ["size", "state", "length", "asciiobject_size"]),
    ("gc", ["size", "collecting"]),
]
_DEBUG_314 = [
    ("runtime_state", ["size", "finalizing", "interpreters_head"]),
    (
        "interpreter_state",
        [
            "size",
            "id",
            "next",
            "threads_head",
            "threads_main",
            "gc",
            "imports_modules",
            "sysdict",
            "builtins",
            "ceval_gil",
            "gil_runtime_state",
            "gil_runtime_state_enabled",
            "gil_runtime_state_locked",
            "gil_runtime_state_holder",
            "code_object_generation",
            "tlbc_generation",
        ],
    ),
    (
        "thread_state",
        [
            "size",
            "prev",
            "next",
            "interp",
            "current_frame",
            "thread_id",
            "native_thread_id",
            "datastack_chunk",
            "status",
        ],
    ),
    (
        "interpreter_frame",
        ["size", "previous", "executable", "instr_ptr", "localsplus", "owner", "stackpointer", "tlbc_index"],
    ),
    (
        "code_object",
        [
            "size",
            "filename",
            "name",
            "qualname",
            "linetable",
            "firstlineno",
            "argcount",
            "localsplusnames",
            "localspluskinds",
            "co_code_adaptive",
            "co_tlbc",
        ],
    ),
    ("pyobject", ["size", "ob_type"]),
    ("type_object", ["size", "tp_name", "tp_repr", "tp_flags"]),
    ("tuple_object", ["size", "ob_item", "ob_size"]),
    ("list_object", ["size", "ob_item", "ob_size"]),
    ("set_object", ["size", "used", "table", "mask"]),
    ("dict_object", ["size", "ma_keys", "ma_values"]),
    ("float_object", ["size", "ob_fval"]),
    ("long_object", ["size", "lv_tag", "ob_digit"]),
    ("bytes_object", ["size", "ob_size", "ob_sval"]),
    ("unicode_object", ["size", "state", "length", "asciiobject_size"]),
]
DEBUG_COOKIE = b"xdebugpy"


# Fields of the 3.14 layout that a 3.14+ build may lack or add (they came and
# went during 3.14's development): every combination is tried, and only a
# parse whose anchors and code-object fields agree with the live interpreter
# is used (a misaligned parse shifts every later section, anchors included).
_OPTIONAL_314 = [
    ("interpreter_state", "threads_main"),
    ("interpreter_state", "code_object_generation"),
    ("interpreter_state", "tlbc_generation"),
    ("interpreter_frame", "stackpointer"),
    ("interpreter_frame", "tlbc_index"),
    ("code_object", "co_tlbc"),
]


def debug_layout(minor: int) -> list:
    """The layout of _Py_DebugOffsets as declared by that version's header."""
    return _DEBUG_313 if minor == 13 else _DEBUG_314


def debug_candidates(minor: int) -> list:
    """Layouts to try, the declared one first."""
    if minor == 13:
        return [_DEBUG_313]
    out = []
    n = len(_OPTIONAL_314)
    for mask in range(1 << n):
        drop = {_OPTIONAL_314[i] for i in range(n) if mask >> i & 1}
        for with_set in (True, False):
            lay = [
                (sec, [f for f in fields if (sec, f) not in drop])
                for sec, fields in _DEBUG_314
                if with_set or sec != "set_object"
            ]
            out.append(lay)
    return out


def parse_debug_offsets(raw: bytes, minor: int, lay: list = None) -> dict:
    """_Py_DebugOffsets bytes -> {"section.field": value, "version": .., "free_threaded": ..}."""
    if raw[:8] != DEBUG_COOKIE:
        raise UnsupportedPython("_PyRuntime does not start with the _Py_DebugOffsets cookie")
    out = {"version": struct.unpack_from("<Q", raw, 8)[0], "free_threaded": struct.unpack_from("<Q", raw, 16)[0]}
    pos = 24
    for section, fields in lay or debug_layout(minor):
        for f in fields:
            if pos + 8 > len(raw):
                raise UnsupportedPython("_Py_DebugOffsets shorter than expected")
            out[f"{section}.{f}"] = struct.unpack_from("<Q", raw, pos)[0]
            pos += 8
    return out


def debug_offsets_size(minor: int) -> int:
    return 24 + 8 * sum(len(f) for _, f in debug_layout(minor))


def _plausible(d: dict, members: dict) -> bool:
    """A parse of _Py_DebugOffsets that the live interpreter agrees with."""
    if (
        d.get("pyobject.ob_type"),
        d.get("pyobject.size"),
        d.get("type_object.tp_name"),
        d.get("unicode_object.length"),
    ) != (OB_TYPE, 16, 24, 16):
        return False
    if d.get("unicode_object.asciiobject_size") not in (40, 48):
        return False
    # Anchors inside the sections before the code object: PyThreadState starts
    # {prev, next, interp}; a 3.12+ _PyInterpreterFrame {f_executable, previous}.
    if (d.get("thread_state.prev"), d.get("thread_state.next"), d.get("thread_state.interp")) != (0, 8, 16):
        return False
    if (d.get("interpreter_frame.executable"), d.get("interpreter_frame.previous")) != (0, 8):
        return False
    if not 100 <= d.get("code_object.size", 0) <= 1024:
        return False
    for member, key in (
        ("co_filename", "filename"),
        ("co_name", "name"),
        ("co_qualname", "qualname"),
        ("co_firstlineno", "firstlineno"),
        ("co_linetable", "linetable"),
    ):
        if member in members and members[member] != d.get(f"code_object.{key}"):
            return False
    return True


def offsets_from_debug(raw: bytes, version: tuple, hexv: int, members: dict) -> dict:
    """3.13+: the offsets _Py_DebugOffsets gives (raw: its bytes from _PyRuntime),
    in the table's keys. members: PyCode_Type.tp_members of the live interpreter,
    which tells the right parse from a misaligned one (see _OPTIONAL_314)."""
    minor = version[1]
    d = None
    for lay in debug_candidates(minor):
        cand = parse_debug_offsets(raw, minor, lay)
        if _plausible(cand, members):
            d = cand
            break
    if d is None:
        raise UnsupportedPython(f"Python {version_str(version)}: _Py_DebugOffsets layout not understood")
    if d["free_threaded"]:
        raise UnsupportedPython(f"Python {version_str(version)} free-threaded build: not supported")
    if (d["version"] >> 16) != (hexv >> 16):
        raise UnsupportedPython(f"_Py_DebugOffsets says version {d['version']:#x}, Py_Version says {hexv:#x}")
    return dict(
        rt_interp_head=d["runtime_state.interpreters_head"],
        interp_next=d["interpreter_state.next"],
        interp_threads=d["interpreter_state.threads_head"],
        ts_next=d["thread_state.next"],
        ts_interp=d["thread_state.interp"],
        ts_thread_id=d["thread_state.thread_id"],
        ts_native_tid=d["thread_state.native_thread_id"],
        ts_frame=d["thread_state.current_frame"],
        cframe_frame=0,
        fr_previous=d["interpreter_frame.previous"],
        fr_code=d["interpreter_frame.executable"],
        fr_instr=d["interpreter_frame.instr_ptr"],
        fr_owner=d["interpreter_frame.owner"],
        co_filename=d["code_object.filename"],
        co_name=d["code_object.name"],
        co_qualname=d["code_object.qualname"],
        co_firstlineno=d["code_object.firstlineno"],
        co_linetable=d["code_object.linetable"],
        co_code=d["code_object.co_code_adaptive"],
        ascii_size=d["unicode_object.asciiobject_size"],
        compact_size=d["unicode_object.asciiobject_size"] + 16,
        str_length=d["unicode_object.length"],
    )
