"""ctypes mirror of shim/include/gpu_agent_probes.h (the probe contract).

Every size, offset and enum value the agent needs comes from here; nothing
else in the agent hand-types an offset. tests/test_contract.py compiles the
header with gcc and fails if anything below disagrees with it, and checks the
shim's .note.stapsdt against PROBES.
"""

from __future__ import annotations

import ctypes as ct
from enum import IntEnum

u8, u32, u64 = ct.c_uint8, ct.c_uint32, ct.c_uint64

PROVIDER = "gpu_agent"
SEMAPHORE_SYMBOL = "gpu_agent_attach_semaphore"
REPLAY_SEMAPHORE_SYMBOL = "gpu_agent_replay_semaphore"
# The contract version the shim exports (GA_CONTRACT_VERSION): a shim of another
# version is refused before any probe of it is read (shim_attach.read_shim).
CONTRACT_VERSION = 5
CONTRACT_VERSION_SYMBOL = "gpu_agent_contract_version"

MAX_FRAMES = 64
BATCH_MAX = 1024
NAME_CHUNK = 512
MAX_NAME_LEN = 64 * 1024

REC_GRAPH = 0x1
REC_IMPOSSIBLE = 0x2
MAX_KERNEL_NS = 1 << 42
MAX_RECORD_WEIGHT = 1 << 20
MAX_BATCH_DROPS = 1 << 24
KERNEL_DROPPED = (1 << 64) - 1
AGG_CAPTURED = 0x1
AGG_NODE_UNKNOWN = 0x2
LAT_BUCKETS = 64

# Probe name -> ordered (argument name, C type) pairs, as in the header comment.
# Pointer arguments are "ptr" (8 bytes on the probe site).
PROBES: dict[str, tuple[tuple[str, str], ...]] = {
    "attach": (),
    "replay": (),
    "cuda_correlation": (("correlation_id", "u32"), ("cbid", "u32"), ("stack_id", "u64"),
                         ("frames", "ptr"), ("nframes", "u32"), ("weight", "u32"),
                         ("launch_ns", "u64")),
    "kernel_batch": (("records", "ptr"), ("nrecords", "u32"), ("record_size", "u32"),
                     ("dropped", "u32")),
    "kernel_name": (("kernel_id", "u64"), ("total_len", "u32"), ("offset", "u32"),
                    ("chunk", "ptr"), ("chunk_len", "u32")),
    "graph_node_stack": (("node_id", "u64"), ("stack_id", "u64"), ("frames", "ptr"),
                         ("nframes", "u32")),
    "graph_node_cloned": (("original_node_id", "u64"), ("node_id", "u64")),
    "graph_node_destroyed": (("node_id", "u64"),),
    "gpu_device": (("ordinal", "u32"), ("uuid", "ptr"), ("model", "ptr"), ("cupti_ns", "u64"),
                   ("realtime_ns", "u64")),
    "pc_sample_batch": (("records", "ptr"), ("nrecords", "u32"), ("dropped", "u32")),
    "pc_stall_reason": (("index", "u32"), ("name", "ptr")),
    "cubin_loaded": (("cubin_crc", "u64"), ("cubin", "ptr"), ("cubin_size", "u64")),
}
# The agent's presence flag for the shim; and its request for a replay of names.
SEMAPHORE_PROBE = "attach"
REPLAY_PROBE = "replay"
SEMAPHORE_PROBES = (SEMAPHORE_PROBE, REPLAY_PROBE)
ARG_SIZES = {"u32": 4, "u64": 8, "ptr": 8}


class KernelRecord(ct.Structure):
    _fields_ = [
        ("start_ns", u64),
        ("end_ns", u64),
        ("kernel_id", u64),
        ("graph_node_id", u64),
        ("correlation_id", u32),
        ("device_id", u32),
        ("context_id", u32),
        ("stream_id", u32),
        ("graph_id", u32),
        ("flags", u32),
        ("weight", u32),
        ("join_max_lag_us", u32),
        ("grid_x", u32), ("grid_y", u32), ("grid_z", u32),
        ("block_x", u32), ("block_y", u32), ("block_z", u32),
    ]


class CorrKey(ct.Structure):
    _fields_ = [("tgid", u32), ("correlation_id", u32), ("start", u32), ("pad", u32)]


class CorrVal(ct.Structure):
    _fields_ = [("stack_id", u64), ("weight", u32), ("cbid", u32), ("launch_ns", u64),
                ("tid", u32), ("pad", u32)]


class LatKey(ct.Structure):
    _fields_ = [("tgid", u32), ("device_id", u32), ("bucket", u32), ("pad", u32)]


class LatVal(ct.Structure):
    _fields_ = [("count", u64), ("sum_ns", u64)]


class StackKey(ct.Structure):
    _fields_ = [("tgid", u32), ("start", u32), ("stack_id", u64)]


class Stack(ct.Structure):
    _fields_ = [("nframes", u32), ("cbid", u32), ("ips", u64 * MAX_FRAMES)]


class NodeKey(ct.Structure):
    _fields_ = [("tgid", u32), ("start", u32), ("node_id", u64)]


class NodeVal(ct.Structure):
    _fields_ = [("stack_id", u64)]


class AggKeyC(ct.Structure):
    _fields_ = [
        ("tgid", u32),
        ("device_id", u32),
        ("stream_id", u32),
        ("graph_id", u32),
        ("kernel_id", u64),
        ("stack_id", u64),
        ("capture_stack_id", u64),
        ("graph_flags", u32),
        ("start", u32),
    ]


class AggValC(ct.Structure):
    _fields_ = [
        ("gpu_ns", u64),
        ("launches", u64),
        ("weighted_ns", u64),
        ("weighted_launches", u64),
    ]


class Counter(IntEnum):
    GA_CNT_KERNELS = 0
    GA_CNT_BATCHES = 1
    GA_CNT_SAMPLES = 2
    GA_CNT_UNSAMPLED = 3
    GA_CNT_NEW_STACKS = 4
    GA_CNT_NAME_CHUNKS = 5
    GA_DROP_AGG_FULL = 6
    GA_DROP_STACK_FULL = 7
    GA_DROP_STACK_READ = 8
    GA_DROP_RECORD_READ = 9
    GA_DROP_BAD_RECORD = 10
    GA_DROP_RINGBUF_FULL = 11
    GA_DROP_NAME_READ = 12
    GA_DROP_CUPTI = 13
    GA_CNT_PY_STACKS = 14
    GA_CNT_PY_NO_THREAD = 15
    GA_DROP_PY_READ = 16
    GA_DROP_PY_STACK_FULL = 17
    GA_CNT_GRAPH_NODES = 18
    GA_CNT_GRAPH_CLONES = 19
    GA_CNT_GRAPH_CLONE_UNKNOWN = 20
    GA_CNT_GRAPH_DESTROYED = 21
    GA_CNT_GRAPH_ATTRIBUTED = 22
    GA_CNT_GRAPH_NODE_UNKNOWN = 23
    GA_DROP_NODE_FULL = 24
    GA_CNT_STALE_JOIN = 25
    GA_DROP_IMPOSSIBLE = 26
    GA_CNT_TRACE_EVENTS = 27
    GA_DROP_TRACE_FULL = 28
    GA_CNT_PG_CORRELATIONS = 29
    GA_CNT_PG_KERNELS = 30
    GA_DROP_PG_ARGS = 31
    GA_CNT_PC_BATCHES = 32
    GA_DROP_PC_READ = 33
    GA_DROP_PC_SAMPLES = 34
    GA_CNT_PG_ERRORS = 35
    GA_DROP_IMPLAUSIBLE = 36
    GA_COUNTER_MAX = 37


COUNTER_MAX = int(Counter.GA_COUNTER_MAX)


def kernel_id(mangled: bytes) -> int:
    """A kernel's id: FNV-1a 64 of its mangled name, of the first MAX_NAME_LEN bytes
    of a longer one, never 0 (the shim's intern_slow)."""
    h = 0xCBF29CE484222325
    for b in mangled[:MAX_NAME_LEN]:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h or 1


def counter_name(c: Counter) -> str:
    """GA_CNT_KERNELS -> "kernels", GA_DROP_AGG_FULL -> "drop_agg_full"."""
    n = c.name[3:].lower()
    return n[4:] if n.startswith("cnt_") else n


class EventType(IntEnum):
    GA_EV_NAME_CHUNK = 1
    GA_EV_NEW_STACK = 2
    GA_EV_PROC_EXIT = 3
    GA_EV_PROC_ATTACH = 4
    GA_EV_KERNEL = 5
    GA_EV_DEVICE = 6
    GA_EV_PC_BATCH = 7
    GA_EV_STALL_REASON = 8
    GA_EV_CUBIN = 9
    GA_EV_PG_PC = 10
    GA_EV_PG_ERROR = 11
    GA_EV_PG_NAME = 12


class EventHdr(ct.Structure):
    _fields_ = [("type", u32), ("tgid", u32)]


class EvNameChunk(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("kernel_id", u64),
        ("total_len", u32),
        ("offset", u32),
        ("len", u32),
        ("flags", u32),
        ("data", ct.c_char * NAME_CHUNK),
    ]


class EvNewStack(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("stack_id", u64), ("start", u32), ("pad", u32)]


class EvProcExit(ct.Structure):
    _fields_ = [("hdr", EventHdr)]


class EvProcAttach(ct.Structure):
    _fields_ = [("hdr", EventHdr)]


class EvKernel(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("launch_tid", u32), ("stack_id", u64),
                ("capture_stack_id", u64), ("launch_ns", u64), ("rec", KernelRecord)]


UUID_LEN, MODEL_LEN = 48, 96


class EvDevice(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("ordinal", u32), ("pad", u32), ("cupti_ns", u64),
                ("realtime_ns", u64), ("uuid", ct.c_char * UUID_LEN), ("model", ct.c_char * MODEL_LEN)]


# ---- PC sampling (gpu_agent_pcsampling.h) ----
PC_BATCH_MAX = 64
STALL_NAME_LEN = 128


class PcRecord(ct.Structure):
    _fields_ = [("cubin_crc", u64), ("pc_offset", u64), ("kernel_id", u64), ("stall_reason", u32),
                ("samples", u32)]


class EvPcBatch(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("nrecords", u32), ("dropped", u32), ("pad", u32),
                ("records", PcRecord * PC_BATCH_MAX)]


class EvStallReason(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("index", u32), ("pad", u32), ("name", ct.c_char * STALL_NAME_LEN)]


class EvCubin(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("pad", u32), ("cubin_crc", u64), ("address", u64),
                ("size", u64)]


# ---- Python stacks (see the header's "Python stacks" section) ----
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
    return (((name8 * PY_STAMP_MUL) & m) ^ ((name_len & 0xFFFFFFFF) << 32)
            ^ (firstlineno & 0xFFFFFFFF))


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


# ---- parcagpu's probes as a second source (gpu_agent_parcagpu.h) ----
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
    _fields_ = [("size", u64), ("cubin_crc", u64), ("pc_offset", u64), ("function_index", u32),
                ("pad", u32), ("function_name", u64), ("stall_reason_count", u64), ("stall_reason", u64)]


class PgStall(ct.Structure):
    _fields_ = [("index", u32), ("samples", u32)]


class EvPgPc(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("nreasons", u32), ("cubin_crc", u64),
                ("pc_offset", u64), ("name_len", u32), ("reasons_cut", u32),
                ("reasons", PgStall * PG_PC_REASONS), ("name", ct.c_char * PG_PC_NAME)]


class EvPgError(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("code", ct.c_int32), ("pad", u32), ("message", ct.c_char * PG_ERROR_LEN),
                ("component", ct.c_char * PG_ERROR_LEN)]


class EvPgName(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("start", u32), ("pad", u32), ("kernel_id", u64), ("address", u64)]


# C struct name -> ctypes mirror; the contract test walks this.
STRUCTS: dict[str, type[ct.Structure]] = {
    "ga_kernel_record": KernelRecord,
    "ga_corr_key": CorrKey,
    "ga_corr_val": CorrVal,
    "ga_stack_key": StackKey,
    "ga_stack": Stack,
    "ga_node_key": NodeKey,
    "ga_node_val": NodeVal,
    "ga_agg_key": AggKeyC,
    "ga_agg_val": AggValC,
    "ga_lat_key": LatKey,
    "ga_lat_val": LatVal,
    "ga_event_hdr": EventHdr,
    "ga_ev_name_chunk": EvNameChunk,
    "ga_ev_new_stack": EvNewStack,
    "ga_ev_proc_exit": EvProcExit,
    "ga_ev_proc_attach": EvProcAttach,
    "ga_ev_kernel": EvKernel,
    "ga_ev_device": EvDevice,
    "ga_pc_record": PcRecord,
    "ga_ev_pc_batch": EvPcBatch,
    "ga_ev_stall_reason": EvStallReason,
    "ga_ev_cubin": EvCubin,
    "ga_py_config": PyConfig,
    "ga_py_frame": PyFrame,
    "ga_py_stack": PyStack,
    "ga_pg_arg": PgArg,
    "ga_pg_site_key": PgSiteKey,
    "ga_pg_site": PgSite,
    "ga_pg_name_key": PgNameKey,
    "ga_pg_cupti_pc": PgCuptiPc,
    "ga_pg_stall": PgStall,
    "ga_ev_pg_pc": EvPgPc,
    "ga_ev_pg_error": EvPgError,
    "ga_ev_pg_name": EvPgName,
}
ENUMS: dict[str, type[IntEnum]] = {"ga_counter": Counter, "ga_event_type": EventType}
CONSTANTS: dict[str, int] = {
    "GA_CONTRACT_VERSION": CONTRACT_VERSION,
    "GA_MAX_FRAMES": MAX_FRAMES,
    "GA_BATCH_MAX": BATCH_MAX,
    "GA_NAME_CHUNK": NAME_CHUNK,
    "GA_MAX_NAME_LEN": MAX_NAME_LEN,
    "GA_REC_GRAPH": REC_GRAPH,
    "GA_REC_IMPOSSIBLE": REC_IMPOSSIBLE,
    "GA_MAX_KERNEL_NS": MAX_KERNEL_NS,
    "GA_MAX_RECORD_WEIGHT": MAX_RECORD_WEIGHT,
    "GA_MAX_BATCH_DROPS": MAX_BATCH_DROPS,
    "GA_KERNEL_DROPPED": KERNEL_DROPPED,
    "GA_UUID_LEN": UUID_LEN,
    "GA_MODEL_LEN": MODEL_LEN,
    "GA_AGG_CAPTURED": AGG_CAPTURED,
    "GA_AGG_NODE_UNKNOWN": AGG_NODE_UNKNOWN,
    "GA_LAT_BUCKETS": LAT_BUCKETS,
    "GA_PC_BATCH_MAX": PC_BATCH_MAX,
    "GA_STALL_NAME_LEN": STALL_NAME_LEN,
    "GA_PY_MAX_FRAMES": PY_MAX_FRAMES,
    "GA_PY_MAX_THREADS": PY_MAX_THREADS,
    "GA_PY_NO_INSTR": PY_NO_INSTR,
    "GA_PYC_FRAMEOBJ": PYC_FRAMEOBJ,
    "GA_PYC_CFRAME": PYC_CFRAME,
    "GA_PYC_IS_ENTRY": PYC_IS_ENTRY,
    "GA_PYC_OWNER": PYC_OWNER,
    "GA_PYC_MATCH_PTHREAD": PYC_MATCH_PTHREAD,
    "GA_PY_STAMP_MUL": PY_STAMP_MUL,
    "GA_PYF_ENTRY": PYF_ENTRY,
    "GA_PYS_TRUNCATED": PYS_TRUNCATED,
    "GA_PG_PROBE_CORRELATION": PG_PROBE_CORRELATION,
    "GA_PG_PROBE_KERNEL": PG_PROBE_KERNEL,
    "GA_PG_PROBE_PC_BATCH": PG_PROBE_PC_BATCH,
    "GA_PG_PROBE_STALL_MAP": PG_PROBE_STALL_MAP,
    "GA_PG_PROBE_CUBIN": PG_PROBE_CUBIN,
    "GA_PG_PROBE_ERROR": PG_PROBE_ERROR,
    "GA_PG_ERROR_LEN": PG_ERROR_LEN,
    "GA_PG_PC_BATCH_MAX": PG_PC_BATCH_MAX,
    "GA_PG_PC_REASONS": PG_PC_REASONS,
    "GA_PG_PC_NAME": PG_PC_NAME,
    "GA_PG_CUPTI_PC_BASE": PG_CUPTI_PC_BASE,
    "GA_PG_STALL_SLOT": PG_STALL_SLOT,
    "GA_PG_STALL_MAX": PG_STALL_MAX,
    "GA_PG_MAX_ARGS": PG_MAX_ARGS,
    "GA_AGG_PARCAGPU": AGG_PARCAGPU,
    "GA_NAME_UNVERIFIED": NAME_UNVERIFIED,
    "GA_PG_NAME_CHUNKS": PG_NAME_CHUNKS,
    "GA_PG_ARG_NONE": PG_ARG_NONE,
    "GA_PG_ARG_REG": PG_ARG_REG,
    "GA_PG_ARG_MEM": PG_ARG_MEM,
    "GA_PG_ARG_IMM": PG_ARG_IMM,
    "GA_PG_NREGS": PG_NREGS,
}
STRING_CONSTANTS: dict[str, str] = {"GA_PROVIDER": PROVIDER,
                                    "GA_CONTRACT_VERSION_SYMBOL": CONTRACT_VERSION_SYMBOL,
                                    "GA_SEMAPHORE_SYMBOL": SEMAPHORE_SYMBOL,
                                    "GA_REPLAY_SEMAPHORE_SYMBOL": REPLAY_SEMAPHORE_SYMBOL,
                                    "GA_PG_REG_NAMES": PG_REG_NAMES}
