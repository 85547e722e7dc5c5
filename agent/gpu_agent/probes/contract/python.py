"""The contract's Python-stack part: the "Python stacks" section of
shim/include/gpu_agent_python.h."""

from __future__ import annotations

import ctypes as ct

from .probes import u32, u64

PY_MAX_FRAMES = 128
PY_MAX_THREADS = 256
PY_NO_INSTR = 0xFFFFFFFF
PYC_FRAMEOBJ = 0x1
PYC_CFRAME = 0x2
PYC_IS_ENTRY = 0x4
PYC_OWNER = 0x8
PYC_MATCH_PTHREAD = 0x10
PY_STAMP_MUL = 0x100000001B3
PYF_ENTRY = 0x1
PYS_TRUNCATED = 0x1


def py_stamp(name8: int, name_len: int, firstlineno: int) -> int:
    """GA_PY_STAMP: the validation stamp BPF takes of a code object at a sample."""
    m = (1 << 64) - 1
    return ((name8 * PY_STAMP_MUL) & m) ^ ((name_len & 0xFFFFFFFF) << 32) ^ (firstlineno & 0xFFFFFFFF)


class PyConfig(ct.Structure):
    _fields_ = [
        ("runtime", u64),
        ("code_type", u64),
        ("pidns_dev", u64),
        ("pidns_ino", u64),
        ("version", u32),
        ("flags", u32),
        ("rt_interp_head", u32),
        ("interp_next", u32),
        ("interp_threads", u32),
        ("ts_next", u32),
        ("ts_thread_id", u32),
        ("ts_native_tid", u32),
        ("ts_frame", u32),
        ("cframe_frame", u32),
        ("fr_previous", u32),
        ("fr_code", u32),
        ("fr_instr", u32),
        ("fr_owner", u32),
        ("fr_size", u32),
        ("owner_shim", u32),
        ("co_firstlineno", u32),
        ("co_name", u32),
        ("co_code", u32),
        ("co_size", u32),
        ("str_length", u32),
        ("str_data", u32),
        ("task_fsbase", u32),
        ("pad", u32),
    ]


class PyFrame(ct.Structure):
    _fields_ = [("code", u64), ("stamp", u64), ("instr", u32), ("flags", u32)]


class PyStack(ct.Structure):
    _fields_ = [("nframes", u32), ("flags", u32), ("frames", PyFrame * PY_MAX_FRAMES)]
