"""The contract's PC sampling part: shim/include/gpu_agent_pcsampling.h."""

from __future__ import annotations

import ctypes as ct

from .probes import EventHdr, u32, u64

PC_BATCH_MAX = 64
STALL_NAME_LEN = 128


class PcRecord(ct.Structure):
    _fields_ = [("cubin_crc", u64), ("pc_offset", u64), ("kernel_id", u64), ("stall_reason", u32), ("samples", u32)]


class EvPcBatch(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("start", u32),
        ("nrecords", u32),
        ("dropped", u32),
        ("pad", u32),
        ("records", PcRecord * PC_BATCH_MAX),
    ]


class EvStallReason(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("index", u32), ("pad", u32), ("name", ct.c_char * STALL_NAME_LEN)]


class EvCubin(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("pad", u32), ("cubin_crc", u64), ("address", u64), ("size", u64)]
