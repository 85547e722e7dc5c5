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
import sys
import struct
import time
from collections import deque
from typing import Callable, Optional

from ..probes import contract as C
from ..profile.pprof import FrameSpec
from .model import Drop, Frame, KernelEvent, Timeline

# Kernel events kept while a capture runs, each packed into RAW's 200 bytes (as
# tuples of Python ints they took about 1 KiB for the whole capture). Writing the
# timeline unpacks them: at that peak each costs about 0.8 KiB (300 000 kept events
# add 243 MiB on the 2-core VM; docs/timeline.md).
DEFAULT_RING = 250_000
RAW = struct.Struct("<25Q")
RETENTIONS = ("drop-oldest", "backpressure")


class TimelineCollector:
    """Kernel events of the collector's session, for the pids the collector includes
    (the others' are neither kept nor counted), in a ring of `ring` events. When it
    is full, drop-oldest keeps the newest events and counts the ones it let go;
    backpressure pauses the capture: it says so once, calls on_pause (`trace`
    returns its targets to the always-on windows), and counts the events that still
    arrive without keeping them."""

    def __init__(
        self,
        collector,
        ring: int = DEFAULT_RING,
        retention: str = "drop-oldest",
        on_pause: Optional[Callable[[], None]] = None,
    ):
        if retention not in RETENTIONS:
            raise ValueError(f"retention must be one of {', '.join(RETENTIONS)}")
        self.collector = collector
        self.ring, self.retention, self.on_pause = ring, retention, on_pause
        self._raw: deque = deque(maxlen=ring if retention == "drop-oldest" else None)
        self.dropped_oldest = 0  # drop-oldest: events the ring let go
        self.not_kept = 0  # backpressure: events after the pause
        self.paused_ns = 0  # CLOCK_REALTIME of the pause (0: never)
        self.refused = 0  # records that cannot be true (as BPF counts drop_impossible)
        self._threads: dict[tuple[int, int], str] = {}
        collector.session.on_kernel = self._on_kernel
        collector.session.on_device = collector.note_device

    def _on_kernel(self, ev: C.EvKernel) -> None:
        # `record` traces every process (its command's descendants are not known to
        # BPF) and keeps its own: another process's kernels (a system-wide `run`'s
        # workload maps the same shim) must neither fill the ring nor count in its
        # drops. The decision is the collector's, made once per pid while it lives.
        if not self.collector.included(ev.hdr.tgid):
            return
        if len(self._raw) >= self.ring:
            if self.retention == "drop-oldest":
                self.dropped_oldest += 1  # the append below lets the oldest go
            else:
                if not self.paused_ns:
                    self._pause()
                self.not_kept += 1
                return
        r, pid = ev.rec, ev.hdr.tgid
        if ev.launch_tid and (pid, ev.launch_tid) not in self._threads:
            self._threads[(pid, ev.launch_tid)] = _thread_name(pid, ev.launch_tid)
        self._raw.append(
            RAW.pack(
                pid,
                ev.start,
                r.start_ns,
                r.end_ns,
                r.kernel_id,
                r.device_id,
                r.stream_id,
                r.context_id,
                r.correlation_id,
                r.graph_id,
                r.graph_node_id,
                r.flags,
                r.join_max_lag_us,
                ev.stack_id,
                ev.capture_stack_id,
                ev.launch_tid,
                ev.launch_ns,
                r.grid_x,
                r.grid_y,
                r.grid_z,
                r.block_x,
                r.block_y,
                r.block_z,
                0,
                0,
            )
        )

    def _pause(self) -> None:
        self.paused_ns = time.time_ns()
        print(
            f"gpu-agent: timeline ring full ({self.ring} kernel events): capture paused "
            "(--retention backpressure); later kernels are counted, not kept",
            file=sys.stderr,
        )
        if self.on_pause is not None:
            self.on_pause()

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
                tl.stacks[stack_ids[key]] = [_frame(f) for f in c.stacks.specs(pid, sid, start)]
            return stack_ids[key]

        for raw in self._raw:
            (
                pid,
                start,
                t0,
                t1,
                kid,
                dev,
                stream,
                ctx,
                corr,
                gid,
                gnode,
                flags,
                lag,
                sid,
                cap,
                tid,
                launch,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                _,
                _,
            ) = RAW.unpack(raw)
            grid, block = (gx, gy, gz), (bx, by, bz)
            if not c.included(pid):
                continue
            if kid == 0 or t1 < t0 or t1 - t0 > C.MAX_KERNEL_NS or flags & C.REC_IMPOSSIBLE:
                self.refused += 1
                continue
            if sid and lag and launch and (t0 < launch or t0 - launch > lag * 1000):
                sid = tid = launch = 0  # a sample of an earlier window (join_max_lag_us)
            off = c.clock_offset(pid)
            name, mangled = c.kernel_name_or_unknown(kid)
            graph = bool(gid or gnode)
            k = KernelEvent(
                pid=pid,
                start_ns=t0 + off,
                end_ns=t1 + off,
                name=name,
                mangled=mangled,
                device=dev,
                stream=stream,
                context=ctx,
                correlation_id=corr,
                graph_id=gid,
                graph_node_id=gnode,
                grid=grid if grid[0] else None,
                block=block if block[0] else None,
            )
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
        for what, n in (
            ("trace_ringbuf", counters.get("drop_trace_full", 0)),
            ("ring_oldest", self.dropped_oldest),
            ("paused", self.not_kept),
            ("impossible", self.refused),
            # the timeline's processes' own, as BPF counted them (the profiles count
            # them once each interval has bounded them; a trace builds no interval)
            ("cupti", c.session.trace_drops(tl.processes)),
        ):
            if n:
                tl.drops.append(Drop(what, int(n)))
        tl.monotonic_raw_pair = clock_pair()
        if any(c.clock_offset(pid) == 0 for pid in tl.processes):
            tl.clock = "CUPTI"  # a process whose devices were never announced: no mapping
        return tl


def clock_pair(
    realtime: Callable[[], int] = time.time_ns,
    raw: Callable[[], int] = lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW),
    reads: int = 50,
) -> tuple[int, int]:
    """CLOCK_REALTIME and CLOCK_MONOTONIC_RAW at one instant (Timeline.monotonic_raw_pair:
    it puts a .nanotrace's times, which its snapshots put on CLOCK_MONOTONIC_RAW, on the
    timeline's clock): a realtime read between two raw reads, their middle, the
    narrowest of `reads`. Two reads one after the other were 2.4-3.3 us apart in the
    agent on an H200 (another thread may take the interpreter between them), and every
    merged in-kernel event sat that much early (docs/benchmarks.md)."""
    best = None
    for _ in range(reads):
        lo = raw()
        rt = realtime()
        hi = raw()
        if best is None or hi - lo < best[0]:
            best = (hi - lo, rt, (lo + hi) // 2)
    return best[1], best[2]


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
