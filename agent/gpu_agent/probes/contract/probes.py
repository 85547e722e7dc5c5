"""The probe contract's main part: shim/include/gpu_agent_probes.h (probes, records,
BPF map keys and values, counters, ring-buffer events)."""

from __future__ import annotations

import ctypes as ct
from enum import IntEnum

u8, u32, u64 = ct.c_uint8, ct.c_uint32, ct.c_uint64

PROVIDER = "gpu_agent"
SEMAPHORE_SYMBOL = "gpu_agent_attach_semaphore"
REPLAY_SEMAPHORE_SYMBOL = "gpu_agent_replay_semaphore"
# The contract version the shim exports (GA_CONTRACT_VERSION): a shim of another
# version is refused before any probe of it is read (shim_attach.read_shim).
CONTRACT_VERSION = 7
CONTRACT_VERSION_SYMBOL = "gpu_agent_contract_version"

MAX_FRAMES = 64
BATCH_MAX = 1024
NAME_CHUNK = 512
COMM_LEN = 16
ATTACH_EVERY_NS = 1_000_000_000
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
    "cuda_correlation": (
        ("correlation_id", "u32"),
        ("cbid", "u32"),
        ("stack_id", "u64"),
        ("frames", "ptr"),
        ("nframes", "u32"),
        ("weight", "u32"),
        ("launch_ns", "u64"),
    ),
    "kernel_batch": (("records", "ptr"), ("nrecords", "u32"), ("record_size", "u32"), ("dropped", "u32")),
    "kernel_name": (
        ("kernel_id", "u64"),
        ("total_len", "u32"),
        ("offset", "u32"),
        ("chunk", "ptr"),
        ("chunk_len", "u32"),
    ),
    "graph_node_stack": (("node_id", "u64"), ("stack_id", "u64"), ("frames", "ptr"), ("nframes", "u32")),
    "graph_node_cloned": (("original_node_id", "u64"), ("node_id", "u64")),
    "graph_node_destroyed": (("node_id", "u64"),),
    "gpu_device": (("ordinal", "u32"), ("uuid", "ptr"), ("model", "ptr"), ("cupti_ns", "u64"), ("realtime_ns", "u64")),
    "pc_sample_batch": (("records", "ptr"), ("nrecords", "u32"), ("dropped", "u32")),
    "pc_stall_reason": (("index", "u32"), ("name", "ptr")),
    "cubin_loaded": (("cubin_crc", "u64"), ("cubin", "ptr"), ("cubin_size", "u64")),
    "published": (("until_ns", "u64"), ("final", "u32")),
    "period_shape": (("span_start_ns", "u64"), ("span_end_ns", "u64"), ("shares", "ptr"), ("nshares", "u32")),
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
        ("grid_x", u32),
        ("grid_y", u32),
        ("grid_z", u32),
        ("block_x", u32),
        ("block_y", u32),
        ("block_z", u32),
        ("span_start_ns", u64),
        ("span_end_ns", u64),
    ]


class CorrKey(ct.Structure):
    _fields_ = [("tgid", u32), ("correlation_id", u32), ("start", u32), ("pad", u32)]


class CorrVal(ct.Structure):
    _fields_ = [("stack_id", u64), ("weight", u32), ("cbid", u32), ("launch_ns", u64), ("tid", u32), ("pad", u32)]


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
        ("span_start_ns", u64),
        ("span_end_ns", u64),
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
    GA_DROP_SHAPE_READ = 37
    GA_CNT_ATTACH_REPEATS = 38
    GA_DROP_BATCH_CHAIN = 39
    GA_COUNTER_MAX = 40


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
    GA_EV_PUBLISHED = 13
    GA_EV_SHAPE = 14


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
    _fields_ = [("hdr", EventHdr), ("comm", ct.c_char * COMM_LEN)]


class EvPublished(ct.Structure):
    _fields_ = [("hdr", EventHdr), ("until_ns", u64), ("final", u32), ("start", u32)]


# period_shape: a span's shares (of SHAPE_ONE) at each of its SHAPE_KNOTS knots
SHAPE_KNOTS = 32
SHAPE_ONE = 65535


class EvShape(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("start", u32),
        ("pad", u32),
        ("span_start_ns", u64),
        ("span_end_ns", u64),
        ("shares", ct.c_uint16 * SHAPE_KNOTS),
    ]


class EvKernel(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("start", u32),
        ("launch_tid", u32),
        ("stack_id", u64),
        ("capture_stack_id", u64),
        ("launch_ns", u64),
        ("rec", KernelRecord),
    ]


UUID_LEN, MODEL_LEN = 48, 96


class EvDevice(ct.Structure):
    _fields_ = [
        ("hdr", EventHdr),
        ("ordinal", u32),
        ("pad", u32),
        ("cupti_ns", u64),
        ("realtime_ns", u64),
        ("uuid", ct.c_char * UUID_LEN),
        ("model", ct.c_char * MODEL_LEN),
    ]
