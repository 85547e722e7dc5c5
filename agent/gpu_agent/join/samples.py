"""One estimated row (join/estimator.py) as a profile sample: its frames (the
kernel as leaf, then its launch stack, or for a graph node its capture stack under
a replay marker) and its labels (process, device, stream, graph, window, source,
pod)."""

from __future__ import annotations

from typing import Optional

from ..probes import contract as C
from ..probes.devices import GpuDevice
from ..probes.parcagpu import SOURCE_LABEL as PARCAGPU_SOURCE
from ..profile.interval import ProcInfo
from ..profile.pprof import FrameSpec
from ..profile.vocabulary import DUTY_LABEL, GRAPH_BEFORE_ATTACH, GRAPH_REPLAY, GRAPH_REPLAY_LABEL, UNSAMPLED
from .stacks import StackNames


def kernel_sample(
    row, info: ProcInfo, name: tuple[str, str], stacks: StackNames, gpu: Optional[GpuDevice], windowed: bool
) -> tuple[list, dict]:
    """row: an estimator row of a named kernel; name: (demangled, mangled); gpu: its
    device if known; windowed: its process's shim collects in windows."""
    tgid, device_id, stream_id, graph_id, _, capture_id, gflags, start = row.key
    leaf = FrameSpec.kernel(name[1] or name[0], name[0])
    stack = [FrameSpec.marker(UNSAMPLED)] if row.stack_id is None else stacks.specs(tgid, row.stack_id, start)
    labels = {"pid": str(tgid), "comm": info.comm, "cuda_device": str(device_id), "cuda_stream": str(stream_id)}
    if gpu is not None:  # DCGM's identity of the device, so dashboards can join
        labels.update({k: v for k, v in (("gpu_uuid", gpu.uuid), ("gpu_model", gpu.model)) if v})
    if graph_id:
        labels["cuda_graph"] = str(graph_id)
    if windowed:
        labels[DUTY_LABEL] = "true"
    if gflags & C.AGG_PARCAGPU:
        labels["source"] = PARCAGPU_SOURCE
    if gflags & C.AGG_CAPTURED:
        # Exact: every record of this node has this capture stack. The replay
        # site (estimated over sampled graph launches) is a label.
        labels[GRAPH_REPLAY_LABEL] = (
            UNSAMPLED if row.stack_id is None else stacks.replay_site(tgid, row.stack_id, start)
        )
        stack = [FrameSpec.marker(GRAPH_REPLAY)] + stacks.specs(tgid, capture_id, start)
    elif gflags & C.AGG_NODE_UNKNOWN:
        stack = [FrameSpec.marker(GRAPH_BEFORE_ATTACH)] + stack
    labels.update(info.pod)
    return [leaf] + stack, labels
