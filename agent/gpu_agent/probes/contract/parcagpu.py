"""The contract's parcagpu part: shim/include/gpu_agent_parcagpu.h (parcagpu's probes
as a second source)."""

from __future__ import annotations

import ctypes as ct

from .probes import EventHdr, u32, u64

PG_PROBE_CORRELATION = 0
PG_PROBE_KERNEL = 1
PG_PROBE_PC_BATCH = 2
PG_PROBE_STALL_MAP = 3
PG_PROBE_CUBIN = 4
PG_PROBE_ERROR = 5
PG_ERROR_LEN = 128
PG_PC_BATCH_MAX = 128
PG_PC_REASONS = 64
PG_PC_NAME = 512
PG_CUPTI_PC_BASE = 56
PG_STALL_SLOT = 64
PG_STALL_MAX = 64
PG_MAX_ARGS = 8
AGG_PARCAGPU = 0x4
NAME_UNVERIFIED = 0x1
PG_NAME_CHUNKS = 16
PG_ARG_NONE, PG_ARG_REG, PG_ARG_MEM, PG_ARG_IMM = 0, 1, 2, 3
PG_REG_NAMES = "rax,rbx,rcx,rdx,rsi,rdi,rbp,rsp,r8,r9,r10,r11,r12,r13,r14,r15,rip"
PG_NREGS = 17


class PgArg(ct.Structure):
    _fields_ = [("disp", u64), ("kind", u32), ("reg", u32), ("size", u32), ("is_signed", u32)]


class PgSiteKey(ct.Structure):
    _fields_ = [("probe", u32), ("page_offset", u32)]


class PgSite(ct.Structure):
    _fields_ = [("nargs", u32), ("pad", u32), ("args", PgArg * PG_MAX_ARGS)]


class PgNameKey(ct.Structure):
    _fields_ = [("tgid", u32), ("start", u32), ("name", u64)]


class PgCuptiPc(ct.Structure):
    _fields_ = [
        ("size", u64),
        ("cubin_crc", u64),
        ("pc_offset", u64),
        ("function_index", u32),
        ("pad", u32),
        ("function_name", u64),
        ("stall_reason_count", u64),
        ("stall_reason", u64),
    ]


class PgStall(ct.Structure):
    _fields_ = [("index", u32), ("samples", u32)]


class EvPgPc(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("start", u32),
        ("nreasons", u32),
        ("cubin_crc", u64),
        ("pc_offset", u64),
        ("name_len", u32),
        ("reasons_cut", u32),
        ("reasons", PgStall * PG_PC_REASONS),
        ("name", ct.c_char * PG_PC_NAME),
    ]


class EvPgError(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("code", ct.c_int32),
        ("pad", u32),
        ("message", ct.c_char * PG_ERROR_LEN),
        ("component", ct.c_char * PG_ERROR_LEN),
    ]


class EvPgName(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("pad", u32), ("kernel_id", u64), ("address", u64)]
