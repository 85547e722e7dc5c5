"""What every trace format says about a kernel, in one place, so that the
Perfetto, Chrome and NDJSON outputs name the same fields the same way."""

from __future__ import annotations

from ..probes.devices import GpuDevice
from .model import Frame, KernelEvent, Timeline


def frame_text(f: Frame) -> str:
    """One frame as a line of text: "forward (model.py:42)" for a Python frame,
    the bare name for a native frame without a file."""
    if not f.file:
        return f.name
    return f"{f.name} ({f.file}:{f.line})" if f.line else f"{f.name} ({f.file})"


def stack_text(tl: Timeline, stack_id: int | None) -> list[str]:
    """A stack as text, leaf first (the Timeline's order); [] when unknown."""
    if stack_id is None:
        return []
    return [frame_text(f) for f in tl.stacks.get(stack_id, ())]


def device_label(dev: GpuDevice) -> str:
    """ "GPU 0: NVIDIA H100 80GB HBM3 (GPU-8f2c…)": the ordinal alone is
    ambiguous across processes (CUDA_VISIBLE_DEVICES), the UUID is not."""
    label = f"GPU {dev.ordinal}"
    if dev.model:
        label += f": {dev.model}"
    if dev.uuid:
        label += f" ({dev.uuid})"
    return label


def is_graph_kernel(k: KernelEvent) -> bool:
    return k.graph_id != 0


def kernel_args(tl: Timeline, k: KernelEvent) -> dict:
    """The kernel's identifying fields as plain values (int, str, [int]), in a
    stable order. Stacks are not here: each format has its own way of sharing
    them."""
    args: dict = {
        "correlation_id": k.correlation_id,
        "device": k.device,
        "stream": k.stream,
        "context": k.context,
    }
    dev = tl.device_of(k)
    if dev.uuid:
        args["device_uuid"] = dev.uuid
    if dev.model:
        args["device_model"] = dev.model
    if k.grid is not None:
        args["grid"] = list(k.grid)
    if k.block is not None:
        args["block"] = list(k.block)
    if is_graph_kernel(k):
        args["graph_id"] = k.graph_id
        args["graph_node_id"] = k.graph_node_id
    if k.mangled:
        args["mangled"] = k.mangled
    if k.stack_id is not None:
        args["stack_id"] = k.stack_id
    if k.replay_stack_id is not None:
        args["replay_stack_id"] = k.replay_stack_id
    return args


def launch_name(k: KernelEvent) -> str:
    """The CPU-side event a sampled launch becomes: a graph's kernels all come
    from one cudaGraphLaunch, the others from their own launch call."""
    return "cudaGraphLaunch" if is_graph_kernel(k) else "cudaLaunchKernel"


def launch_stack_id(k: KernelEvent) -> int | None:
    """The stack of the launching thread at launch_ns: for a graph kernel the
    replay site (stack_id is the capture-time stack), else the launch stack."""
    return k.replay_stack_id if is_graph_kernel(k) else k.stack_id


def kernel_end(k: KernelEvent) -> int:
    """A record whose end is before its start (a clock glitch) is drawn with no
    duration rather than a negative one, which viewers reject."""
    return max(k.end_ns, k.start_ns)


def assign_lanes(kernels: list[KernelEvent]) -> list[int]:
    """Kernels of one stream run one after another, but not always: with
    programmatic dependent launch the next kernel starts before the last ends.
    Slices on one track must nest, so a kernel that overlaps the previous one
    on its stream goes to a second lane (track) of that stream. Returns the lane
    of each kernel, by index; lane 0 almost always."""
    lanes = [0] * len(kernels)
    ends: dict[tuple, list[int]] = {}  # (pid, device, stream) -> each lane's last end
    for i in sorted(range(len(kernels)), key=lambda i: kernels[i].start_ns):
        k = kernels[i]
        lane_ends = ends.setdefault((k.pid, k.device, k.stream), [])
        for lane, end in enumerate(lane_ends):
            if k.start_ns >= end:
                break
        else:
            lane = len(lane_ends)
            lane_ends.append(0)
        lane_ends[lane] = kernel_end(k)
        lanes[i] = lane
    return lanes


def stream_label(stream: int, lane: int) -> str:
    return f"stream {stream}" if lane == 0 else f"stream {stream} (overlap {lane})"


def sampled_launches(tl: Timeline, flow_id) -> tuple[dict[int, int], dict[tuple[int, int, int], list]]:
    """The flow arrows of sampled launches: kernel index -> flow id (flow_id(k, n),
    n counting from 1), and each sampled launch (pid, tid, launch_ns) -> [its first
    kernel, the flow ids of the kernels it launched]; a graph launch has several."""
    flows: dict[int, int] = {}
    launches: dict[tuple[int, int, int], list] = {}
    for i, k in enumerate(tl.kernels):
        if k.launch_tid is None or k.launch_ns is None:
            continue
        flows[i] = flow_id(k, len(flows) + 1)
        launches.setdefault((k.pid, k.launch_tid, k.launch_ns), [k, []])[1].append(flows[i])
    return flows, launches


# The Perfetto description of every track of a merged .nanotrace, then its file:
# the UI's reader keeps their slices apart from the kernels.
INKERNEL = "in-kernel events from"
