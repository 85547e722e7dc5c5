"""Collecting a kernel timeline (timeline.Timeline) beside a Collector.

BPF sends each record of a traced process as a GA_EV_KERNEL event (set_trace,
bpf/gpu_agent.bpf.c), with the sampled launch and the graph node's capture stack
it joined to it; the shim's gpu_device probe gives each device's identity and a
reading of CUPTI's clock next to CLOCK_REALTIME (GA_EV_DEVICE). Events are kept
compact while the capture runs and turned into a Timeline at its end, when their
stacks are named through the collector (native and Python frames, the same names
as the profiles')."""

from __future__ import annotations

import socket
from typing import Optional

from . import contract as C
from .pprof import FrameSpec
from .timeline import Drop, Frame, GpuDevice, KernelEvent, Timeline

DEFAULT_MAX_KERNELS = 2_000_000  # about 200 MB of compact events; past it, counted


def device_from_event(ev: C.EvDevice) -> GpuDevice:
    return GpuDevice(ev.ordinal, ev.uuid.split(b"\0", 1)[0].decode("ascii", "replace"),
                     ev.model.split(b"\0", 1)[0].decode("utf-8", "replace"))


class TimelineCollector:
    """Kernel events of the collector's session, for the pids the collector includes."""

    def __init__(self, collector, max_kernels: int = DEFAULT_MAX_KERNELS):
        self.collector = collector
        self.max_kernels = max_kernels
        self._raw: list[tuple] = []
        self.over_cap = 0
        self.refused = 0          # records that cannot be true (as BPF counts drop_impossible)
        self._threads: dict[tuple[int, int], str] = {}
        collector.session.on_kernel = self._on_kernel
        collector.session.on_device = collector.note_device

    def _on_kernel(self, ev: C.EvKernel) -> None:
        if len(self._raw) >= self.max_kernels:
            self.over_cap += 1
            return
        r, pid = ev.rec, ev.hdr.tgid
        if ev.launch_tid and (pid, ev.launch_tid) not in self._threads:
            self._threads[(pid, ev.launch_tid)] = _thread_name(pid, ev.launch_tid)
        self._raw.append((pid, ev.start, r.start_ns, r.end_ns, r.kernel_id, r.device_id, r.stream_id,
                          r.context_id, r.correlation_id, r.graph_id, r.graph_node_id, r.flags,
                          r.join_max_lag_us, ev.stack_id, ev.capture_stack_id, ev.launch_tid,
                          ev.launch_ns))

    def build(self, started_ns: int, ended_ns: int) -> Timeline:
        c = self.collector
        tl = Timeline(host=socket.gethostname(), started_ns=started_ns, ended_ns=ended_ns)
        stack_ids: dict[tuple[int, int, int], int] = {}

        def stack(pid: int, start: int, sid: int) -> Optional[int]:
            if not sid:
                return None
            key = (pid, start, sid)
            if key not in stack_ids:
                stack_ids[key] = len(stack_ids) + 1
                tl.stacks[stack_ids[key]] = [_frame(f) for f in c._stack_specs(pid, sid, start)]
            return stack_ids[key]

        for (pid, start, t0, t1, kid, dev, stream, ctx, corr, gid, gnode, flags, lag, sid, cap,
             tid, launch) in self._raw:
            if not c.included(pid):
                continue
            if kid == 0 or t1 < t0 or t1 - t0 > C.MAX_KERNEL_NS or flags & C.REC_IMPOSSIBLE:
                self.refused += 1
                continue
            if sid and lag and launch and (t0 < launch or t0 - launch > lag * 1000):
                sid = tid = launch = 0  # a sample of an earlier window (join_max_lag_us)
            off = c.clock_offset(pid)
            name, mangled = c._kernel_name(kid)
            graph = bool(gid or gnode)
            k = KernelEvent(pid=pid, start_ns=t0 + off, end_ns=t1 + off, name=name, mangled=mangled,
                            device=dev, stream=stream, context=ctx, correlation_id=corr,
                            graph_id=gid, graph_node_id=gnode)
            if graph:
                k.stack_id = stack(pid, start, cap)
                k.replay_stack_id = stack(pid, start, sid)
            else:
                k.stack_id = stack(pid, start, sid)
            if sid and tid and launch:
                k.launch_tid, k.launch_ns = tid, launch + off
            tl.kernels.append(k)
            if pid not in tl.processes:
                tl.processes[pid] = c.proc(pid).comm
        tl.kernels.sort(key=lambda k: (k.start_ns, k.pid))
        tl.devices = {key: d for key, d in c.devices.items() if key[0] in tl.processes}
        tl.threads = {key: n for key, n in self._threads.items() if key[0] in tl.processes}
        counters = c.counters()
        for what, n in (("trace_ringbuf", counters.get("drop_trace_full", 0)),
                        ("trace_cap", self.over_cap), ("impossible", self.refused),
                        ("cupti", counters.get("drop_cupti", 0))):
            if n:
                tl.drops.append(Drop(what, int(n)))
        if any(c.clock_offset(pid) == 0 for pid in tl.processes):
            tl.clock = "CUPTI"  # a process whose devices were never announced: no mapping
        return tl


def _frame(f: FrameSpec) -> Frame:
    if f.mapping is not None and f.mapping.filename == "[python]":
        return Frame(f.function, "python", f.filename, f.line)
    if f.filename == "CUDA_KERNEL":
        return Frame(f.function, "kernel")
    return Frame(f.function, "native", f.filename, f.line)


def _thread_name(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""
