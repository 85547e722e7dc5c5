"""Perfetto's interned data for timeline/perfetto_trace.py: names, frames and
callstacks get an iid on first use, sent with the packet that first refers to
them; and the stable ids of tracks and flows."""

from __future__ import annotations

import hashlib

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .model import Frame

_FRAME_KIND = {
    "python": pb.Frame.KIND_INTERPRETED,
    "native": pb.Frame.KIND_NATIVE,
}


def uid(*parts) -> int:
    """A stable 63-bit id for a track or a flow (63: some readers sign it)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1) or 1


class Interner:
    """Perfetto's interning: each string or message gets an iid on first use and
    is sent in the InternedData of the packet that first refers to it."""

    def __init__(self):
        self._tables: dict[str, dict] = {}
        self._pending: pb.InternedData | None = None

    def _iid(self, table: str, key) -> tuple[int, bool]:
        ids = self._tables.setdefault(table, {})
        iid = ids.get(key)
        if iid is not None:
            return iid, False
        iid = ids[key] = len(ids) + 1  # iid 0 means "unset"
        return iid, True

    def _new(self) -> pb.InternedData:
        if self._pending is None:
            self._pending = pb.InternedData()
        return self._pending

    def string(self, table: str, s: str) -> int:
        """InternedData tables whose entries have a `name` (EventName,
        EventCategory, DebugAnnotationName) or a `str` (InternedString)."""
        iid, new = self._iid(table, s)
        if new:
            entry = getattr(self._new(), table).add()
            entry.iid = iid
            if table in ("event_names", "event_categories", "debug_annotation_names"):
                entry.name = s
            else:
                entry.str = s.encode()
        return iid

    def frame(self, f: Frame) -> int:
        iid, new = self._iid("frames", f)
        if new:
            # trace_processor interns a frame by (mapping, rel_pc, name); a frame's
            # own iid as its rel_pc keeps two lines of one function apart.
            path = f.file or f"[{f.kind}]"
            mapping, new_mapping = self._iid("mappings", path)
            if new_mapping:
                m = self._new().mappings.add()
                m.iid = mapping
                m.path_string_ids.append(self.string("mapping_paths", path))
            e = self._new().frames.add()
            e.iid = iid
            e.function_name_id = self.string("function_names", f.name)
            e.mapping_id = mapping
            e.rel_pc = iid
            if f.file:
                e.source_path_iid = self.string("source_paths", f.file)
            if f.line:
                e.line_number = f.line
            e.kind = _FRAME_KIND.get(f.kind, pb.Frame.KIND_UNKNOWN)
        return iid

    def callstack(self, stack_id: int, frames: list[Frame]) -> int:
        iid, new = self._iid("callstacks", stack_id)
        if new:
            frame_ids = [self.frame(f) for f in reversed(frames)]  # outermost first
            e = self._new().callstacks.add()
            e.iid = iid
            e.frame_ids.extend(frame_ids)
        return iid

    def flush_into(self, packet: pb.TracePacket) -> None:
        if self._pending is not None:
            packet.interned_data.CopyFrom(self._pending)
            self._pending = None
