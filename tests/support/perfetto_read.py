"""Reading a Perfetto trace back with the perfetto package's own protos, the way
trace_processor resolves it (trace_processor itself cannot run offline here: the
package downloads its binary). Shared by the writer tests and the end-to-end
timeline tests."""

from __future__ import annotations

from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


class _Interned:
    """The interning state of one packet sequence, as a reader keeps it."""

    def __init__(self):
        self.t: dict[str, dict] = {}

    def add(self, data: pb.InternedData) -> None:
        for field, entries in data.ListFields():
            table = self.t.setdefault(field.name, {})
            for e in entries:
                table[e.iid] = e

    def name(self, table: str, iid: int) -> str:
        e = self.t[table][iid]
        return e.name if hasattr(e, "name") and table != "mappings" else e.str.decode()

    def value(self, a: pb.DebugAnnotation):
        kind = a.WhichOneof("value")
        if kind == "string_value_iid":
            return self.name("debug_annotation_string_values", a.string_value_iid)
        if kind in ("uint_value", "int_value", "bool_value", "string_value", "double_value"):
            return getattr(a, kind)
        return [self.value(x) for x in a.array_values]

    def args(self, e: pb.TrackEvent) -> dict:
        return {self.name("debug_annotation_names", a.name_iid): self.value(a) for a in e.debug_annotations}

    def callstack(self, iid: int) -> list[tuple]:
        frames = []
        for fid in self.t["callstacks"][iid].frame_ids:
            f = self.t["frames"][fid]
            frames.append(
                (
                    self.name("function_names", f.function_name_id),
                    self.name("source_paths", f.source_path_iid) if f.source_path_iid else "",
                    f.line_number,
                    f.kind,
                )
            )
        return frames


def read_perfetto(path: Path):
    """Parses the trace with the perfetto package's Trace message and resolves it
    the way trace_processor does: interning per sequence, slices by begin/end on
    their track, flows by id."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    packets = list(trace.packet)
    tracks, slices, instants, counters = {}, [], [], {}
    open_slices: dict[int, list] = {}
    interned: dict[int, _Interned] = {}
    for p in packets:
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            interned[seq] = _Interned()
        if p.HasField("interned_data"):
            interned[seq].add(p.interned_data)
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if not p.HasField("track_event"):
            continue
        assert p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        assert p.timestamp_clock_id == pb.BUILTIN_CLOCK_REALTIME
        e, st = p.track_event, interned[seq]
        assert e.track_uuid in tracks, "an event on a track with no descriptor"
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            s = {
                "track": e.track_uuid,
                "ts": p.timestamp,
                "name": st.name("event_names", e.name_iid),
                "cats": [st.name("event_categories", c) for c in e.category_iids],
                "args": st.args(e),
                "flows_in": list(e.terminating_flow_ids),
                "stack": st.callstack(e.callstack_iid) if e.callstack_iid else None,
            }
            open_slices.setdefault(e.track_uuid, []).append(s)
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            s = open_slices[e.track_uuid].pop()
            s["dur"] = p.timestamp - s["ts"]
            slices.append(s)
        elif e.type == pb.TrackEvent.TYPE_INSTANT:
            instants.append(
                {
                    "track": e.track_uuid,
                    "ts": p.timestamp,
                    "name": st.name("event_names", e.name_iid),
                    "args": st.args(e),
                    "flows_out": list(e.flow_ids),
                    "stack": st.callstack(e.callstack_iid) if e.callstack_iid else None,
                }
            )
        elif e.type == pb.TrackEvent.TYPE_COUNTER:
            counters.setdefault(e.track_uuid, []).append((p.timestamp, e.counter_value))
    assert not any(open_slices.values()), "a slice without its end"
    return packets, tracks, slices, instants, counters


def hangs_under(tracks: dict, uuid: int, ancestor: int, label: str) -> bool:
    """Whether track uuid hangs below track `ancestor` through a track whose name
    holds `label` (a merged .nanotrace's tracks under their kernel's stream)."""
    named = False
    while uuid in tracks and uuid != ancestor:
        named |= label in tracks[uuid].name
        uuid = tracks[uuid].parent_uuid
    return uuid == ancestor and named
