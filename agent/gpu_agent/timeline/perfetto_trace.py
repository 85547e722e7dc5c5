"""A Timeline as a Perfetto trace (ui.perfetto.dev, trace_processor).

Built with the protobuf classes the `perfetto` package ships
(perfetto_trace_pb2) and written one packet at a time with its
StreamingTraceProtoBuilder, so that memory stays bounded by the distinct names
and stacks, not by the number of kernels.

What the trace holds:
- a track per process, under it one per GPU device (named by model and UUID),
  under each device one per stream; kernels are slices on their stream's track;
- the launching thread's track, for sampled launches: an instant
  (cudaLaunchKernel / cudaGraphLaunch) with a flow arrow to each kernel it
  launched;
- each kernel's launch stack as an interned callstack (and as text in its
  arguments), and for graph kernels the replay site;
- drops as counter tracks.

Timestamps are CLOCK_REALTIME ns: the first packet is a clock snapshot that
makes REALTIME the trace's clock, and every packet says its clock is REALTIME,
so that traces of several processes or hosts (or windows of one run,
concatenated by `gpu-agent ui`) line up.

Track uuids and flow ids are hashes of (host, pid, …), not counters, so that
the same process's tracks in two traces of one host are the same tracks when
the traces are concatenated, and two hosts' never collide."""

from __future__ import annotations

import contextlib
from typing import BinaryIO

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

from ..system.atomic import private_output
from .model import InKernel, KernelEvent, Timeline
from .perfetto_intern import Interner, uid
from .kernel_fields import (
    INKERNEL,
    assign_lanes,
    device_label,
    is_graph_kernel,
    kernel_args,
    kernel_end,
    launch_name,
    launch_stack_id,
    sampled_launches,
    stack_text,
    stream_label,
)

# One writer, one sequence. Interned data is scoped to (sequence, generation):
# each file starts a new generation (SEQ_INCREMENTAL_STATE_CLEARED), so files
# appended to one another keep their own interning.
_SEQUENCE_ID = 0x6A5
_CLOCK = pb.BUILTIN_CLOCK_REALTIME
_CATEGORY = "cuda"


class _PerfettoWriter:
    def __init__(self, tl: Timeline, out: BinaryIO):
        self.tl = tl
        self.builder = StreamingTraceProtoBuilder(out)
        self.interner = Interner()
        self.tracks: set[int] = set()
        self.fragments: dict[tuple[str, int], bytes] = {}
        self.stream_tracks: dict[tuple, int] = {}

    # -- packets -------------------------------------------------------------

    def _packet(self) -> pb.TracePacket:
        p = self.builder.create_packet()
        p.trusted_packet_sequence_id = _SEQUENCE_ID
        return p

    def _write(self, p: pb.TracePacket) -> None:
        self.builder.write_packet(p)

    def start(self) -> None:
        # The clock snapshot must come before any timestamp is converted: it makes
        # REALTIME the trace's clock, and a snapshot with one clock needs no other.
        p = self._packet()
        clock = p.clock_snapshot.clocks.add()
        clock.clock_id = _CLOCK
        clock.timestamp = self.tl.started_ns
        p.clock_snapshot.primary_trace_clock = _CLOCK
        self._write(p)
        p = self._packet()
        p.first_packet_on_sequence = True
        p.sequence_flags = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        p.trace_packet_defaults.timestamp_clock_id = _CLOCK
        self._write(p)

    def _event(self, ts: int, track: int, type_: int, name: str | None = None) -> pb.TracePacket:
        p = self._packet()
        p.timestamp = ts
        p.timestamp_clock_id = _CLOCK
        p.sequence_flags = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        e = p.track_event
        e.type = type_
        e.track_uuid = track
        if name is not None:
            e.name_iid = self.interner.string("event_names", name)
            e.category_iids.append(self.interner.string("event_categories", _CATEGORY))
        return p

    def _send_event(self, p: pb.TracePacket) -> None:
        self.interner.flush_into(p)
        self._write(p)

    # -- tracks --------------------------------------------------------------

    def _descriptor(self, uuid: int, fill) -> int:
        if uuid not in self.tracks:
            self.tracks.add(uuid)
            p = self._packet()
            p.track_descriptor.uuid = uuid
            fill(p.track_descriptor)
            self._write(p)
        return uuid

    def process_track(self, pid: int) -> int:
        def fill(d):
            d.process.pid = pid
            comm = self.tl.processes.get(pid)
            if comm:
                d.process.process_name = comm
            d.child_ordering = pb.TrackDescriptor.EXPLICIT

        return self._descriptor(uid(self.tl.host, "process", pid), fill)

    def thread_track(self, pid: int, tid: int) -> int:
        self.process_track(pid)

        def fill(d):
            d.thread.pid = pid
            d.thread.tid = tid
            name = self.tl.threads.get((pid, tid))
            if name:
                d.thread.thread_name = name

        return self._descriptor(uid(self.tl.host, "thread", pid, tid), fill)

    def device_track(self, pid: int, ordinal: int) -> int:
        parent = self.process_track(pid)
        dev = self.tl.devices.get((pid, ordinal))

        def fill(d):
            d.parent_uuid = parent
            d.name = device_label(dev) if dev else f"GPU {ordinal}"
            if dev and dev.uuid:
                d.description = f"CUDA device {ordinal} of pid {pid}: {dev.model or 'unknown model'}, {dev.uuid}"
            d.child_ordering = pb.TrackDescriptor.EXPLICIT
            d.sibling_order_rank = ordinal

        return self._descriptor(uid(self.tl.host, "gpu", pid, ordinal), fill)

    def stream_track(self, k: KernelEvent, lane: int) -> int:
        key = (k.pid, k.device, k.stream, lane)
        uuid = self.stream_tracks.get(key)  # every kernel asks: no hashing each time
        if uuid is None:
            uuid = self.stream_tracks[key] = self._new_stream_track(k, lane)
        return uuid

    def _new_stream_track(self, k: KernelEvent, lane: int) -> int:
        parent = self.device_track(k.pid, k.device)

        def fill(d):
            d.parent_uuid = parent
            d.name = stream_label(k.stream, lane)
            # Streams in the order CUDA numbers them (the default stream first).
            d.sibling_order_rank = min(k.stream, 1 << 30) * 8 + min(lane, 7)

        return self._descriptor(uid(self.tl.host, "stream", k.pid, k.device, k.stream, lane), fill)

    # -- events --------------------------------------------------------------

    def _annotate(self, e: pb.TrackEvent, key: str, value) -> None:
        a = e.debug_annotations.add()
        a.name_iid = self.interner.string("debug_annotation_names", key)
        self._set_value(a, value)

    def _set_value(self, a: pb.DebugAnnotation, value) -> None:
        if type(value) is int:  # most values: ids and numbers
            if value >= 0:
                a.uint_value = value
            else:
                a.int_value = value
        elif isinstance(value, bool):
            a.bool_value = value
        elif isinstance(value, str):
            a.string_value_iid = self.interner.string("debug_annotation_string_values", value)
        elif isinstance(value, (int, float)):  # an in-kernel event's floating argument
            a.double_value = float(value)
        else:  # a list: grid, block, stack text
            for item in value:
                self._set_value(a.array_values.add(), item)

    def _stack(self, e: pb.TrackEvent, key: str, stack_id: int | None) -> None:
        """A stack on an event: as text in its arguments (every Perfetto UI shows
        them), and the launch stack also as an interned callstack (what
        trace_processor's callstack tables and newer UIs read).

        Most of a kernel's encoding is its stacks, and they repeat: each (key,
        stack) is built once, kept serialized, and merged into later events
        (merging a serialized message appends to its repeated fields)."""
        if stack_id is None or stack_id not in self.tl.stacks:
            return
        fragment = self.fragments.get((key, stack_id))
        if fragment is None:
            part = pb.TrackEvent()
            if key == "launch_stack":
                part.callstack_iid = self.interner.callstack(stack_id, self.tl.stacks[stack_id])
            self._annotate(part, key, stack_text(self.tl, stack_id))
            fragment = self.fragments[(key, stack_id)] = part.SerializeToString()
        e.MergeFromString(fragment)

    def kernel(self, k: KernelEvent, lane: int, flow: int | None) -> None:
        track = self.stream_track(k, lane)
        begin = self._event(k.start_ns, track, pb.TrackEvent.TYPE_SLICE_BEGIN, k.name or k.mangled)
        e = begin.track_event
        if is_graph_kernel(k):
            e.category_iids.append(self.interner.string("event_categories", "cuda_graph"))
        for key, value in kernel_args(self.tl, k).items():
            self._annotate(e, key, value)
        self._stack(e, "launch_stack", k.stack_id)
        self._stack(e, "replay_stack", k.replay_stack_id)
        if flow is not None:
            e.terminating_flow_ids.append(flow)
        self._send_event(begin)
        self._send_event(self._event(kernel_end(k), track, pb.TrackEvent.TYPE_SLICE_END))

    def inkernel(self, n: int, ik: InKernel, lane: int) -> None:
        """A .nanotrace file's tracks as child tracks of the kernel's stream, named
        after the kernel (its CTAs, their warps inside), and their slices."""
        k = self.tl.kernels[ik.kernel]
        stream = self.stream_track(k, lane)
        label = f"{k.name or k.mangled} #{k.correlation_id}"
        uuids = {0: stream}
        for t in ik.tracks:

            def fill(d, t=t):
                d.parent_uuid = uuids[t.parent]
                d.name = f"{label}: {t.name}" if t.parent == 0 else t.name
                d.description = f"{INKERNEL} {ik.source}"
                d.sibling_order_rank = t.id

            uuids[t.id] = self._descriptor(uid(self.tl.host, "inkernel", n, t.id), fill)
        for e in ik.events:
            begin = self._event(e.start_ns, uuids[e.track], pb.TrackEvent.TYPE_SLICE_BEGIN, e.name or "event")
            for key, value in e.args:
                self._annotate(begin.track_event, str(key), value)
            self._send_event(begin)
            self._send_event(self._event(e.end_ns, uuids[e.track], pb.TrackEvent.TYPE_SLICE_END))

    def launch(self, pid: int, tid: int, ts: int, first: KernelEvent, flows: list[int]) -> None:
        """One instant per sampled launch call; a graph launch's kernels all
        share it, each with its own flow arrow."""
        p = self._event(ts, self.thread_track(pid, tid), pb.TrackEvent.TYPE_INSTANT, launch_name(first))
        e = p.track_event
        e.flow_ids.extend(flows)
        self._annotate(e, "correlation_id", first.correlation_id)
        self._annotate(e, "kernel", first.name or first.mangled)
        if is_graph_kernel(first):
            self._annotate(e, "graph_id", first.graph_id)
            self._annotate(e, "kernels", len(flows))
        self._stack(e, "launch_stack", launch_stack_id(first))
        self._send_event(p)

    def drops(self) -> None:
        """A counter per (process, what) that steps from 0 at the start to the
        count at the end: a drop has a total, not a time."""
        end = self.tl.ended_ns or max((kernel_end(k) for k in self.tl.kernels), default=self.tl.started_ns)
        totals: dict[tuple, int] = {}
        for d in self.tl.drops:
            totals[(d.pid, d.what)] = totals.get((d.pid, d.what), 0) + d.count
        for (pid, what), count in sorted(totals.items(), key=lambda kv: (kv[0][0] or 0, kv[0][1])):
            parent = self.process_track(pid) if pid is not None else None

            def fill(d, what=what, parent=parent):
                if parent is not None:
                    d.parent_uuid = parent
                d.name = f"dropped: {what}" if parent is not None else f"gpu-agent dropped: {what}"
                d.counter.unit = pb.CounterDescriptor.UNIT_COUNT
                d.sibling_order_rank = -1  # above the GPUs

            track = self._descriptor(uid(self.tl.host, "drops", pid, what), fill)
            for ts, value in ((self.tl.started_ns, 0), (max(end, self.tl.started_ns), count)):
                p = self._event(ts, track, pb.TrackEvent.TYPE_COUNTER)
                p.track_event.counter_value = value
                self._send_event(p)


class _Tee:
    """One stream written to several files."""

    def __init__(self, outs: list):
        self.outs = outs

    def write(self, data) -> int:
        for o in self.outs:
            o.write(data)
        return len(data)


def write_perfetto(timeline: Timeline, path, *copies) -> None:
    """Write `timeline` to `path` as a Perfetto protobuf trace, and the same bytes
    to each of `copies` (serialized once)."""
    tl = timeline
    # Flow ids hashed, not counted: traces concatenated by the UI stay apart.
    flows, launches = sampled_launches(
        tl, lambda k, n: uid(tl.host, "flow", k.pid, k.correlation_id, k.launch_ns, k.graph_node_id, k.start_ns)
    )
    lanes = assign_lanes(tl.kernels)
    with contextlib.ExitStack() as stack:
        outs = [stack.enter_context(private_output(p)) for p in (path, *copies)]
        w = _PerfettoWriter(tl, outs[0] if len(outs) == 1 else _Tee(outs))
        w.start()
        for pid in sorted(tl.processes):
            w.process_track(pid)
        for pid, ordinal in sorted(tl.devices):
            w.device_track(pid, ordinal)
        for (pid, tid, ts), (first, fl) in launches.items():
            w.launch(pid, tid, ts, first, fl)
        for i, k in enumerate(tl.kernels):
            w.kernel(k, lanes[i], flows.get(i))
        for n, ik in enumerate(tl.inkernel):
            w.inkernel(n, ik, lanes[ik.kernel])
        w.drops()
