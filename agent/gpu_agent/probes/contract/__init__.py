"""ctypes mirror of the probe contract: shim/include/gpu_agent_probes.h and its
PC sampling, Python-stack and parcagpu parts, one module each, all read as one
namespace (`from gpu_agent.probes import contract as C`; `C.EvKernel`).

Every size, offset and enum value the agent needs comes from here; nothing
else in the agent hand-types an offset. tests/test_contract.py compiles the
headers with gcc and fails if anything below disagrees with them, and checks the
shim's .note.stapsdt against PROBES.
"""

from __future__ import annotations

import ctypes as ct

from .parcagpu import *  # noqa: F401,F403
from .pcsampling import *  # noqa: F401,F403
from .probes import *  # noqa: F401,F403
from .python import *  # noqa: F401,F403

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
    "ga_ev_published": EvPublished,
    "ga_ev_shape": EvShape,
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
    "GA_SHAPE_KNOTS": SHAPE_KNOTS,
    "GA_SHAPE_ONE": SHAPE_ONE,
    "GA_BATCH_MAX": BATCH_MAX,
    "GA_NAME_CHUNK": NAME_CHUNK,
    "GA_COMM_LEN": COMM_LEN,
    "GA_ATTACH_EVERY_NS": ATTACH_EVERY_NS,
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
STRING_CONSTANTS: dict[str, str] = {
    "GA_PROVIDER": PROVIDER,
    "GA_CONTRACT_VERSION_SYMBOL": CONTRACT_VERSION_SYMBOL,
    "GA_SEMAPHORE_SYMBOL": SEMAPHORE_SYMBOL,
    "GA_REPLAY_SEMAPHORE_SYMBOL": REPLAY_SEMAPHORE_SYMBOL,
    "GA_PG_REG_NAMES": PG_REG_NAMES,
}
