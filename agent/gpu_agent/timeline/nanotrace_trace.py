"""A Timeline as a version 4 `.nanotrace` (`--trace-format nanotrace`), for the
nanotrace viewer: no 4.29 s limit, so whole programs open in the tool kernel
authors know. Tracks: each process, its GPUs, their streams; every kernel a slice
on its stream (its correlation id, grid, block, graph and stacks as
arguments, leaf first); the in-kernel events merged from .nanotrace files under a kernel track
beneath their stream, CTAs holding their warps.

Times are on the file's reference clock, CLOCK_MONOTONIC_RAW (version 4 knows no
CLOCK_REALTIME), by the capture's own reading of both clocks; a timeline without
that reading keeps CLOCK_REALTIME's numbers on it, and its session name says so."""

from __future__ import annotations

from ..system.atomic import private_output
from .kernel_fields import assign_lanes, device_label, kernel_end, stack_text, stream_label
from .model import Timeline
from .nanotrace import Event, Nanotrace, Track, encode_v4
from .nanotrace.model import KERNEL, THREAD_BLOCK, WARP

PROCESS, GPU_DEVICE, GPU_STREAM = 0, 2, 3  # docs/nanotrace.md's track kinds
MONOTONIC_RAW = 0


def to_nanotrace(tl: Timeline) -> Nanotrace:
    shift = tl.monotonic_raw_pair[1] - tl.monotonic_raw_pair[0] if tl.monotonic_raw_pair else 0
    session = f"gpu-agent on {tl.host}" + ("" if tl.monotonic_raw_pair else " (times are CLOCK_REALTIME)")
    t = Nanotrace(version=4, session=session, reference_clock=1)
    t.clocks = {1: (MONOTONIC_RAW, "CLOCK_MONOTONIC_RAW", 0, 1_000_000_000)}
    ids: dict[tuple, int] = {}

    def track(key: tuple, parent: int, name: str, kind: int, source: int, order: int = 0) -> int:
        if key not in ids:
            ids[key] = len(t.tracks) + 1
            t.tracks[ids[key]] = Track(ids[key], parent, 1, name, kind, source, order)
        return ids[key]

    lanes = assign_lanes(tl.kernels)
    kernel_tracks: dict[int, int] = {}
    for i, k in enumerate(tl.kernels):
        proc = track(("p", k.pid), 0, f"{tl.processes.get(k.pid, '')} ({k.pid})", PROCESS, k.pid)
        dev = tl.devices.get((k.pid, k.device))
        gpu = track(
            ("g", k.pid, k.device),
            proc,
            device_label(dev) if dev else f"GPU {k.device}",
            GPU_DEVICE,
            k.device,
            k.device,
        )
        stream = track(
            ("s", k.pid, k.device, k.stream, lanes[i]),
            gpu,
            stream_label(k.stream, lanes[i]),
            GPU_STREAM,
            k.stream,
            min(k.stream, 1 << 30),
        )
        kernel_tracks[i] = stream
        args = [("correlation_id", k.correlation_id), ("device", k.device), ("stream", k.stream)]
        if k.grid:
            args.append(("grid", "x".join(map(str, k.grid))))
        if k.block:
            args.append(("block", "x".join(map(str, k.block))))
        if k.graph_id or k.graph_node_id:
            args += [("graph_id", k.graph_id), ("graph_node_id", k.graph_node_id)]
        if k.mangled and k.mangled != k.name:
            args.append(("mangled", k.mangled))
        for key, sid in (("stack", k.stack_id), ("replay_stack", k.replay_stack_id)):  # as in the NDJSON
            if sid is not None:
                args.append((key, "\n".join(stack_text(tl, sid))))
        t.events.append(
            Event(
                stream,
                k.start_ns + shift,
                max(0, kernel_end(k) - k.start_ns),
                k.name or k.mangled,
                correlation=k.correlation_id,
                args=tuple(args),
            )
        )
    for n, ik in enumerate(tl.inkernel):
        k = tl.kernels[ik.kernel]
        root = track(
            ("k", n), kernel_tracks[ik.kernel], f"{k.name or k.mangled} #{k.correlation_id}", KERNEL, k.correlation_id
        )
        mine = {0: root}
        for tr in ik.tracks:
            mine[tr.id] = track(
                ("i", n, tr.id), mine[tr.parent], tr.name, THREAD_BLOCK if tr.parent == 0 else WARP, tr.id, tr.id
            )
        for e in ik.events:
            t.events.append(
                Event(
                    mine[e.track],
                    e.start_ns + shift,
                    e.end_ns - e.start_ns,
                    e.name,
                    args=tuple((str(a), v) for a, v in e.args),
                )
            )
    return t


def write_nanotrace(timeline: Timeline, path) -> None:
    """Write `timeline` to `path` as a version 4 .nanotrace."""
    data = encode_v4(to_nanotrace(timeline))
    with private_output(path) as out:
        out.write(data)
