"""A Timeline as a Chrome JSON trace ("Trace Event Format"), for
chrome://tracing, ui.perfetto.dev's JSON importer and older tools.

- Each kernel is a complete ("X") event. Its row is a GPU stream of its process:
  pid is the process's own, tid a made-up id per (device, stream), named by "M"
  (thread_name) events as "GPU 0: <model> (<uuid>) stream 7" and sorted after
  the process's threads.
- A sampled launch is a zero-length "X" on the launching thread (the real tid)
  and a flow ("s" there, "f" on the kernel) per kernel it launched.
- Stacks are text lists in each event's args (launch_stack, replay_stack). The
  format has no other way that the viewers people use show; for a large
  timeline prefer the Perfetto trace, which interns them.

Timestamps are CLOCK_REALTIME in microseconds, the format's unit. They are
written as exact decimals (nanoseconds after the point): a float64 holds
today's epoch in µs only to about 0.25 µs, so they are formatted from the
integer nanoseconds rather than through float. Readers that parse them into
doubles round them; the file itself loses nothing.

The file is written event by event: memory does not grow with the kernels."""

from __future__ import annotations

import json

from ..atomic import private_output
from ..timeline import KernelEvent, Timeline
from .kernel_fields import (assign_lanes, device_label, is_graph_kernel, kernel_args,
                            kernel_end, launch_name, launch_stack_id, sampled_launches, stack_text,
                            stream_label)

# Made-up tids of GPU rows start here: above Linux's pid_max (4 194 304), so
# they never meet a real thread's id.
_GPU_TID_BASE = 1 << 23


def _us(ns: int) -> str:
    """ns as exact decimal µs: 1712345678901234567 -> "1712345678901234.567"."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _line(event: dict, ts_ns: int | None = None, dur_ns: int | None = None) -> str:
    """One event as JSON, with ts/dur spliced in as exact decimals."""
    text = json.dumps(event, separators=(",", ":"))
    extra = ""
    if ts_ns is not None:
        extra += f',"ts":{_us(ts_ns)}'
    if dur_ns is not None:
        extra += f',"dur":{_us(dur_ns)}'
    return text[:-1] + extra + "}"


class _ChromeWriter:
    def __init__(self, tl: Timeline, out):
        self.tl = tl
        self.out = out
        self.first = True
        self.named_pids: set[int] = set()
        self.gpu_tids: dict[tuple, int] = {}       # (pid, device, stream, lane) -> tid
        self.named_threads: set[tuple[int, int]] = set()

    def emit(self, line: str) -> None:
        self.out.write(line if self.first else ",\n" + line)
        self.first = False

    def meta(self, name: str, pid: int, tid: int | None, args: dict) -> None:
        event = {"ph": "M", "name": name, "pid": pid, "args": args}
        if tid is not None:
            event["tid"] = tid
        self.emit(_line(event))

    def process(self, pid: int) -> None:
        if pid in self.named_pids:
            return
        self.named_pids.add(pid)
        comm = self.tl.processes.get(pid)
        self.meta("process_name", pid, None, {"name": f"{comm} ({pid})" if comm else f"pid {pid}"})

    def thread(self, pid: int, tid: int) -> None:
        self.process(pid)
        if (pid, tid) in self.named_threads:
            return
        self.named_threads.add((pid, tid))
        name = self.tl.threads.get((pid, tid))
        if name:
            self.meta("thread_name", pid, tid, {"name": name})

    def gpu_row(self, k: KernelEvent, lane: int) -> int:
        key = (k.pid, k.device, k.stream, lane)
        tid = self.gpu_tids.get(key)
        if tid is None:
            self.process(k.pid)
            tid = self.gpu_tids[key] = _GPU_TID_BASE + len(self.gpu_tids)
            label = f"{device_label(self.tl.device_of(k))} {stream_label(k.stream, lane)}"
            self.meta("thread_name", k.pid, tid, {"name": label})
            # GPU rows after the CPU threads, by device then stream.
            self.meta("thread_sort_index", k.pid, tid,
                      {"sort_index": _GPU_TID_BASE + k.device * 4096 + min(k.stream, 4095)})
        return tid

    def kernel(self, k: KernelEvent, lane: int, flow: int | None) -> None:
        tid = self.gpu_row(k, lane)
        args = kernel_args(self.tl, k)
        if k.stack_id is not None:
            args["launch_stack"] = stack_text(self.tl, k.stack_id)
        if k.replay_stack_id is not None:
            args["replay_stack"] = stack_text(self.tl, k.replay_stack_id)
        event = {"ph": "X", "name": k.name or k.mangled,
                 "cat": "cuda,cuda_graph" if is_graph_kernel(k) else "cuda",
                 "pid": k.pid, "tid": tid, "args": args}
        self.emit(_line(event, k.start_ns, kernel_end(k) - k.start_ns))
        if flow is not None:
            # "bp":"e": the arrow ends on the slice that encloses it, the kernel.
            self.emit(_line({"ph": "f", "bp": "e", "name": "launch", "cat": "cuda",
                             "id": flow, "pid": k.pid, "tid": tid}, k.start_ns))

    def launch(self, pid: int, tid: int, ts: int, first: KernelEvent, flows: list[int]) -> None:
        self.thread(pid, tid)
        args = {"correlation_id": first.correlation_id, "kernel": first.name or first.mangled}
        if is_graph_kernel(first):
            args["graph_id"] = first.graph_id
            args["kernels"] = len(flows)
        sid = launch_stack_id(first)
        if sid is not None:
            args["launch_stack"] = stack_text(self.tl, sid)
        # A flow starts on a slice, not an instant: a zero-length one stands for
        # the launch call.
        self.emit(_line({"ph": "X", "name": launch_name(first), "cat": "cuda",
                         "pid": pid, "tid": tid, "args": args}, ts, 0))
        for flow in flows:
            self.emit(_line({"ph": "s", "name": "launch", "cat": "cuda", "id": flow,
                             "pid": pid, "tid": tid}, ts))

    def drops(self) -> None:
        """Drops have totals, not times: one counter ("C") event per process at the
        end of the capture, its series named by what was lost."""
        end = self.tl.ended_ns or max((kernel_end(k) for k in self.tl.kernels),
                                      default=self.tl.started_ns)
        by_pid: dict[int, dict[str, int]] = {}
        for d in self.tl.drops:
            pid = d.pid if d.pid is not None else 0    # 0: the agent's own drops
            series = by_pid.setdefault(pid, {})
            series[d.what] = series.get(d.what, 0) + d.count
        for pid, series in sorted(by_pid.items()):
            if pid:
                self.process(pid)
            else:
                self.meta("process_name", 0, None, {"name": "gpu-agent"})
            self.emit(_line({"ph": "C", "name": "dropped", "pid": pid, "tid": 0, "args": series}, end))


def write_chrome(timeline: Timeline, path) -> None:
    """Write `timeline` to `path` as a Chrome JSON trace."""
    tl = timeline
    # small ints as flow ids: JSON readers parse ids as doubles
    flows, launches = sampled_launches(tl, lambda k, n: n)
    lanes = assign_lanes(tl.kernels)
    with private_output(path, text=True) as out:
        out.write('{"traceEvents":[\n')
        w = _ChromeWriter(tl, out)
        for pid in sorted(tl.processes):
            w.process(pid)
        for (pid, tid) in sorted(tl.threads):
            w.thread(pid, tid)
        for (pid, tid, ts), (first, fl) in launches.items():
            w.launch(pid, tid, ts, first, fl)
        for i, k in enumerate(tl.kernels):
            w.kernel(k, lanes[i], flows.get(i))
        w.drops()
        other = {"clock": tl.clock, "host": tl.host, "started_ns": tl.started_ns,
                 "ended_ns": tl.ended_ns, "generator": "gpu-agent",
                 "devices": [{"pid": pid, "ordinal": d.ordinal, "uuid": d.uuid, "model": d.model}
                             for (pid, _), d in sorted(tl.devices.items())]}
        out.write('\n],\n"displayTimeUnit":"ns",\n"otherData":' + json.dumps(other) + "}\n")
