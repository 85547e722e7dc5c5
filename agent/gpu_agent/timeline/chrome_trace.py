"""A Timeline as a Chrome JSON trace ("Trace Event Format"), for Perfetto's JSON
importer, chrome://tracing and speedscope.

- Each GPU is a process of its own, as PyTorch's profiler (Kineto) lays its
  traces out: a made-up pid (the smallest numbers no profiled process has, so
  that the GPUs come first, and speedscope opens on a GPU stream rather than a
  CPU thread), named "GPU: NVIDIA H100 80GB HBM3 (GPU-8f2c…)" (by UUID, one
  process however many profiled processes use it), and a row ("thread") per
  (process, stream): "python (4242) GPU 0 stream 7".
- Each kernel is a complete ("X") event named by its kernel, with no args:
  speedscope names a frame by its name and args, so per-launch args made every
  kernel a frame of its own, and its Left Heavy and Sandwich views aggregated
  nothing. Mangled names are in otherData.mangled (name -> mangled); per-launch
  details (correlation id, grid, block, graph, stacks) are on the sampled
  launches here, and for every kernel in the Perfetto trace and NDJSON events.
- A sampled launch is a zero-length "X" on the launching thread (the real pid
  and tid), with its correlation id, launch configuration and stack in args,
  and a flow ("s" there, "f" on the kernel) per kernel it launched.

Timestamps are microseconds (the format's unit) from the trace's origin, the
earliest instant in it (CLOCK_REALTIME ns in otherData.ts_origin_ns): absolute
epoch µs do not fit a double to the nanosecond, and readers that parse them
into doubles (speedscope) drew back-to-back kernels overlapping. They are
written as exact decimals from integer nanoseconds. One exception: a kernel
that ends the very nanosecond the next kernel on its row begins is written 1 ns
shorter. speedscope takes each row's times from its first event in doubles, and
the rounding put such a next kernel a few 1e-13 µs inside the last one, which
it then nested wrongly, and its Sandwich view summed a kernel over the rest of
the row. The Perfetto trace and NDJSON events keep the exact end.

The file is written event by event: memory does not grow with the kernels."""

from __future__ import annotations

import json

from ..system.atomic import private_output
from ..probes.devices import GpuDevice
from .model import InKernel, KernelEvent, Timeline
from .kernel_fields import (
    assign_lanes,
    is_graph_kernel,
    kernel_end,
    launch_name,
    launch_stack_id,
    sampled_launches,
    stack_text,
    stream_label,
)


def _us(ns: int) -> str:
    """ns as exact decimal µs: 1234567 -> "1234.567"."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _gpu_name(dev: GpuDevice, pid: int, comm: str | None) -> str:
    """A GPU process's name: by UUID, the identity across processes; without one,
    the ordinal is only that process's."""
    model = f": {dev.model}" if dev.model else ""
    if dev.uuid:
        return f"GPU{model} ({dev.uuid})"
    return f"GPU {dev.ordinal}{model} of {_who(pid, comm)}"


def _who(pid: int, comm: str | None) -> str:
    return f"{comm} ({pid})" if comm else f"pid {pid}"


def trace_origin(tl: Timeline) -> int:
    """The earliest instant of the trace (CLOCK_REALTIME ns): its ts 0."""
    first = min((k.start_ns for k in tl.kernels), default=tl.started_ns)
    launched = min((k.launch_ns for k in tl.kernels if k.launch_ns is not None), default=first)
    return min(tl.started_ns or first, first, launched)


class _ChromeWriter:
    def __init__(self, tl: Timeline, out, origin: int):
        self.tl = tl
        self.out = out
        self.origin = origin
        self.first = True
        self.named_pids: set[int] = set()
        self.named_threads: set[tuple[int, int]] = set()
        # GPU processes: made-up pids below every profiled process's
        taken = set(tl.processes) | {k.pid for k in tl.kernels} | {0}
        self.free_pids = (p for p in range(1, 1 << 31) if p not in taken)
        self.gpu_pids: dict[object, int] = {}  # the GPU's key (UUID, or (pid, ordinal)) -> pid
        self.rows: dict[tuple, tuple[int, int]] = {}  # (pid, device, stream, lane) -> (gpu pid, tid)
        self.row_count: dict[int, int] = {}  # gpu pid -> its rows
        self.mangled: dict[str, str] = {}  # kernel name -> mangled, for otherData

    def emit(self, line: str) -> None:
        self.out.write(line if self.first else ",\n" + line)
        self.first = False

    def line(self, event: dict, ts_ns: int | None = None, dur_ns: int | None = None) -> None:
        """One event, with ts (from the origin) and dur spliced in as exact decimals."""
        text = json.dumps(event, separators=(",", ":"))
        extra = ""
        if ts_ns is not None:
            extra += f',"ts":{_us(ts_ns - self.origin)}'
        if dur_ns is not None:
            extra += f',"dur":{_us(dur_ns)}'
        self.emit(text[:-1] + extra + "}")

    def meta(self, name: str, pid: int, tid: int | None, args: dict) -> None:
        event = {"ph": "M", "name": name, "pid": pid, "args": args}
        if tid is not None:
            event["tid"] = tid
        self.line(event)

    def process(self, pid: int) -> None:
        if pid in self.named_pids:
            return
        self.named_pids.add(pid)
        comm = self.tl.processes.get(pid)
        self.meta("process_name", pid, None, {"name": _who(pid, comm)})

    def thread(self, pid: int, tid: int) -> None:
        self.process(pid)
        if (pid, tid) in self.named_threads:
            return
        self.named_threads.add((pid, tid))
        name = self.tl.threads.get((pid, tid))
        if name:
            self.meta("thread_name", pid, tid, {"name": name})

    def gpu_process(self, k: KernelEvent) -> int:
        dev = self.tl.device_of(k)
        key = dev.uuid or (k.pid, k.device)
        pid = self.gpu_pids.get(key)
        if pid is None:
            pid = self.gpu_pids[key] = next(self.free_pids)
            self.meta("process_name", pid, None, {"name": _gpu_name(dev, k.pid, self.tl.processes.get(k.pid))})
            self.meta("process_sort_index", pid, None, {"sort_index": -(1 << 20) + len(self.gpu_pids)})
        return pid

    def gpu_row(self, k: KernelEvent, lane: int) -> tuple[int, int]:
        key = (k.pid, k.device, k.stream, lane)
        row = self.rows.get(key)
        if row is None:
            pid = self.gpu_process(k)
            self.row_count[pid] = self.row_count.get(pid, 0) + 1
            row = self.rows[key] = (pid, self.row_count[pid])
            who = _who(k.pid, self.tl.processes.get(k.pid))
            self.meta("thread_name", pid, row[1], {"name": f"{who} GPU {k.device} {stream_label(k.stream, lane)}"})
            self.meta("thread_sort_index", pid, row[1], {"sort_index": row[1]})
        return row

    def kernel(self, k: KernelEvent, lane: int, flow: int | None, abutted: bool = False) -> None:
        pid, tid = self.gpu_row(k, lane)
        event = {
            "ph": "X",
            "name": k.name or k.mangled,
            "cat": "cuda,cuda_graph" if is_graph_kernel(k) else "cuda",
            "pid": pid,
            "tid": tid,
        }
        if k.mangled and k.name and k.mangled != k.name:
            self.mangled.setdefault(k.name, k.mangled)
        dur = kernel_end(k) - k.start_ns
        self.line(event, k.start_ns, dur - 1 if abutted and dur > 1 else dur)
        if flow is not None:
            # "bp":"e": the arrow ends on the slice that encloses it, the kernel.
            self.line(
                {"ph": "f", "bp": "e", "name": "launch", "cat": "cuda", "id": flow, "pid": pid, "tid": tid}, k.start_ns
            )

    def inkernel(self, ik: InKernel) -> None:
        """A .nanotrace file's events as a process of their own, one per kernel
        instance, named after it; a thread per track (its path of CTA and warp)."""
        k = self.tl.kernels[ik.kernel]
        pid = next(self.free_pids)
        self.meta("process_name", pid, None, {"name": f"{k.name or k.mangled} #{k.correlation_id} ({ik.source})"})
        self.meta("process_sort_index", pid, None, {"sort_index": -(1 << 19) + pid % (1 << 18)})
        paths: dict[int, str] = {}
        for t in ik.tracks:
            paths[t.id] = f"{paths[t.parent]} / {t.name}" if t.parent else t.name
            self.meta("thread_name", pid, t.id, {"name": paths[t.id]})
            self.meta("thread_sort_index", pid, t.id, {"sort_index": t.id})
        for e in ik.events:
            self.line(
                {
                    "ph": "X",
                    "name": e.name or "event",
                    "cat": "nanotrace",
                    "pid": pid,
                    "tid": e.track,
                    "args": {str(key): value for key, value in e.args},
                },
                e.start_ns,
                e.end_ns - e.start_ns,
            )

    def launch(self, pid: int, tid: int, ts: int, first: KernelEvent, flows: list[int]) -> None:
        self.thread(pid, tid)
        args: dict = {
            "correlation_id": first.correlation_id,
            "kernel": first.name or first.mangled,
            "device": first.device,
            "stream": first.stream,
        }
        if first.grid is not None:
            args["grid"] = list(first.grid)
        if first.block is not None:
            args["block"] = list(first.block)
        if is_graph_kernel(first):
            args["graph_id"] = first.graph_id
            args["kernels"] = len(flows)
        sid = launch_stack_id(first)
        if sid is not None:
            args["launch_stack"] = stack_text(self.tl, sid)
        if is_graph_kernel(first) and first.stack_id is not None:
            args["capture_stack"] = stack_text(self.tl, first.stack_id)
        # A flow starts on a slice, not an instant: a zero-length one stands for
        # the launch call.
        self.line({"ph": "X", "name": launch_name(first), "cat": "cuda", "pid": pid, "tid": tid, "args": args}, ts, 0)
        for flow in flows:
            self.line({"ph": "s", "name": "launch", "cat": "cuda", "id": flow, "pid": pid, "tid": tid}, ts)

    def drops(self) -> None:
        """Drops have totals, not times: one counter ("C") event per process at the
        end of the capture, its series named by what was lost."""
        end = self.tl.ended_ns or max((kernel_end(k) for k in self.tl.kernels), default=self.tl.started_ns)
        by_pid: dict[int, dict[str, int]] = {}
        for d in self.tl.drops:
            pid = d.pid if d.pid is not None else 0  # 0: the agent's own drops
            series = by_pid.setdefault(pid, {})
            series[d.what] = series.get(d.what, 0) + d.count
        for pid, series in sorted(by_pid.items()):
            if pid:
                self.process(pid)
            else:
                self.meta("process_name", 0, None, {"name": "gpu-agent"})
            self.line({"ph": "C", "name": "dropped", "pid": pid, "tid": 0, "args": series}, max(end, self.origin))


def _abutted(kernels: list[KernelEvent], lanes: list[int]) -> set[int]:
    """The kernels (by index) whose end is the start of another kernel on their
    row: written 1 ns shorter (the module's docstring says why)."""
    starts = {(k.pid, k.device, k.stream, lanes[i], k.start_ns) for i, k in enumerate(kernels)}
    return {i for i, k in enumerate(kernels) if (k.pid, k.device, k.stream, lanes[i], kernel_end(k)) in starts}


def write_chrome(timeline: Timeline, path) -> None:
    """Write `timeline` to `path` as a Chrome JSON trace."""
    tl = timeline
    # small ints as flow ids: JSON readers parse ids as doubles
    flows, launches = sampled_launches(tl, lambda k, n: n)
    lanes = assign_lanes(tl.kernels)
    abutted = _abutted(tl.kernels, lanes)
    origin = trace_origin(tl)
    with private_output(path, text=True) as out:
        out.write('{"traceEvents":[\n')
        w = _ChromeWriter(tl, out, origin)
        for i, k in enumerate(tl.kernels):  # the GPUs first, in the order they appear
            w.gpu_row(k, lanes[i])
        for pid in sorted(tl.processes):
            w.process(pid)
        for pid, tid in sorted(tl.threads):
            w.thread(pid, tid)
        for (pid, tid, ts), (first, fl) in launches.items():
            w.launch(pid, tid, ts, first, fl)
        for i, k in enumerate(tl.kernels):
            w.kernel(k, lanes[i], flows.get(i), i in abutted)
        for ik in tl.inkernel:
            w.inkernel(ik)
        w.drops()
        other = {
            "clock": tl.clock,
            "host": tl.host,
            "ts_origin_ns": origin,
            "started_ns": tl.started_ns,
            "ended_ns": tl.ended_ns,
            "generator": "gpu-agent",
            "devices": [
                {"pid": pid, "ordinal": d.ordinal, "uuid": d.uuid, "model": d.model}
                for (pid, _), d in sorted(tl.devices.items())
            ],
            "gpu_processes": [
                {
                    "pid": gpid,
                    "uuid": key if isinstance(key, str) else "",
                    "of_pid": None if isinstance(key, str) else key[0],
                }
                for key, gpid in w.gpu_pids.items()
            ],
            "mangled": w.mangled,
        }
        out.write('\n],\n"displayTimeUnit":"ns",\n"otherData":' + json.dumps(other) + "}\n")
