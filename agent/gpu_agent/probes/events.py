"""The BPF program's ring-buffer events, as the session hears them: each one
checked against its struct's size (a short event is counted corrupt, an unknown
type counted), then a kernel name's chunk to the session's names, a parcagpu name
to its cold names, and the rest to the session's callbacks."""

from __future__ import annotations

import ctypes as ct

from ..system import procfs
from . import contract as C

# Fixed-size ring-buffer events: type -> (struct, the session's callback attribute)
_FIXED_EVENTS = {
    C.EventType.GA_EV_KERNEL: (C.EvKernel, "on_kernel"),
    C.EventType.GA_EV_DEVICE: (C.EvDevice, "on_device"),
    C.EventType.GA_EV_PUBLISHED: (C.EvPublished, "on_published"),
    C.EventType.GA_EV_SHAPE: (C.EvShape, "on_shape"),
    C.EventType.GA_EV_PC_BATCH: (C.EvPcBatch, "on_pc_batch"),
    C.EventType.GA_EV_STALL_REASON: (C.EvStallReason, "on_stall_reason"),
    C.EventType.GA_EV_CUBIN: (C.EvCubin, "on_cubin"),
    C.EventType.GA_EV_PG_PC: (C.EvPgPc, "on_pg_pc"),
    C.EventType.GA_EV_PG_ERROR: (C.EvPgError, "on_pg_error"),
}


def handle_event(session, buf: bytes, counts: dict) -> None:
    """One ring-buffer event of the session's BPF program, checked for its size and
    handed to the session's part that takes it (names, cold names) or its callback;
    counts: the session's agent-side counters."""
    if len(buf) < ct.sizeof(C.EventHdr):
        counts["ev_corrupt"] += 1
        return
    hdr = C.EventHdr.from_buffer_copy(buf)
    if hdr.type == C.EventType.GA_EV_NAME_CHUNK:
        if len(buf) < C.EvNameChunk.data.offset:
            counts["ev_corrupt"] += 1
            return
        ev = C.EvNameChunk.from_buffer_copy(buf.ljust(ct.sizeof(C.EvNameChunk), b"\0"))
        session.names.chunk(
            ev.kernel_id,
            ev.total_len,
            ev.offset,
            ev.len,
            buf[C.EvNameChunk.data.offset :],
            not ev.flags & C.NAME_UNVERIFIED,
        )
    elif hdr.type == C.EventType.GA_EV_PG_NAME:
        if len(buf) < ct.sizeof(C.EvPgName):
            counts["ev_corrupt"] += 1
            return
        ev = C.EvPgName.from_buffer_copy(buf)
        session.cold_names.submit(hdr.tgid, ev.start, ev.kernel_id, ev.address)
    elif hdr.type == C.EventType.GA_EV_NEW_STACK:
        if len(buf) < ct.sizeof(C.EvNewStack):
            counts["ev_corrupt"] += 1
            return
        ev = C.EvNewStack.from_buffer_copy(buf)
        if session.on_new_stack is not None:
            session.on_new_stack(hdr.tgid, ev.stack_id, ev.start)
    elif hdr.type == C.EventType.GA_EV_PROC_EXIT:
        if session.on_proc_exit is not None:
            session.on_proc_exit(hdr.tgid)
    elif hdr.type == C.EventType.GA_EV_PROC_ATTACH:
        if len(buf) < ct.sizeof(C.EvProcAttach):
            counts["ev_corrupt"] += 1
            return
        ev = C.EvProcAttach.from_buffer_copy(buf)
        if session.on_proc_attach is not None:
            session.on_proc_attach(hdr.tgid, procfs.comm_text(ev.comm))
    elif hdr.type in _FIXED_EVENTS:
        kind, attr = _FIXED_EVENTS[hdr.type]
        if len(buf) < ct.sizeof(kind):
            counts["ev_corrupt"] += 1
            return
        fn = getattr(session, attr)
        if fn is not None:
            fn(kind.from_buffer_copy(buf))
    else:
        counts["ev_unknown"] += 1
