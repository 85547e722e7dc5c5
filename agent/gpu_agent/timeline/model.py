"""The kernel timeline: every kernel of the traced processes, in order, with its
launch stack. The collector fills one Timeline (collector.TimelineCollector);
the writers in reporters/ turn it into a Perfetto trace, a Chrome trace or
NDJSON events.

Times are CLOCK_REALTIME nanoseconds, so that traces of several processes and
hosts line up. Stacks are stored once each (Timeline.stacks) and referred to by
id, leaf first, like pprof's locations."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..probes.devices import GpuDevice

SCHEMA_VERSION = 2
MAX_INKERNEL_EVENTS = 5_000_000  # in-kernel events of one timeline, over all its .nanotrace files


@dataclass(frozen=True)
class Frame:
    """One frame: kind is "python", "native" or "kernel" (a kernel leaf)."""

    name: str
    kind: str = "native"
    file: str = ""
    line: int = 0


@dataclass(slots=True)
class KernelEvent:
    pid: int
    start_ns: int  # GPU start, CLOCK_REALTIME
    end_ns: int  # GPU end
    name: str  # demangled
    mangled: str
    device: int  # CUDA device ordinal (Timeline.devices[(pid, device)])
    stream: int
    context: int
    correlation_id: int
    graph_id: int = 0  # 0: not from a graph
    graph_node_id: int = 0
    grid: Optional[tuple[int, int, int]] = None  # when CUPTI gave it
    block: Optional[tuple[int, int, int]] = None
    stack_id: Optional[int] = None  # the launch stack: sampled, or capture-time for graphs
    replay_stack_id: Optional[int] = None  # graph kernels: where the graph was launched
    launch_tid: Optional[int] = None  # the launching thread, when the launch was sampled
    launch_ns: Optional[int] = None  # CLOCK_REALTIME of that launch (a flow arrow's start)


@dataclass
class Drop:
    """Something lost: what (e.g. "cupti", "ringbuf", "stack"), how many, whose."""

    what: str
    count: int
    pid: Optional[int] = None


@dataclass
class InKernelTrack:
    """A track of in-kernel events (a CTA, a warp, a lane) under its kernel: parent 0
    is the kernel itself."""

    id: int
    parent: int
    name: str


@dataclass(slots=True)
class InKernelEvent:
    track: int
    start_ns: int  # CLOCK_REALTIME, inside the kernel's slice
    end_ns: int
    name: str
    args: list = field(default_factory=list)  # [(name, value)]


@dataclass
class InKernel:
    """One `.nanotrace` file's events, placed under one kernel of the timeline
    (timeline/inkernel.py): `kernel` indexes Timeline.kernels."""

    kernel: int
    source: str  # the file, as named on the command line
    placed_by: str  # "clock" or "name, grid and order"
    tracks: list[InKernelTrack] = field(default_factory=list)  # parents before children
    events: list[InKernelEvent] = field(default_factory=list)
    clamped: int = 0  # events cut to the kernel's slice


@dataclass
class Timeline:
    host: str
    started_ns: int  # CLOCK_REALTIME: the capture's start
    ended_ns: int = 0
    clock: str = "CLOCK_REALTIME"
    processes: dict[int, str] = field(default_factory=dict)  # pid -> comm
    threads: dict[tuple[int, int], str] = field(default_factory=dict)  # (pid, tid) -> name
    devices: dict[tuple[int, int], GpuDevice] = field(default_factory=dict)  # (pid, ordinal)
    stacks: dict[int, list[Frame]] = field(default_factory=dict)  # id -> frames, leaf first
    kernels: list[KernelEvent] = field(default_factory=list)
    drops: list[Drop] = field(default_factory=list)
    inkernel: list[InKernel] = field(default_factory=list)
    # CLOCK_REALTIME and CLOCK_MONOTONIC_RAW read together at the capture's end: a
    # version 4 .nanotrace's reference clock (MonotonicRaw) onto this timeline's
    monotonic_raw_pair: Optional[tuple[int, int]] = None

    def device_of(self, k: KernelEvent) -> GpuDevice:
        return self.devices.get((k.pid, k.device), GpuDevice(k.device))
