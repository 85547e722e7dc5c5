"""A process's CUDA devices, from the shim's gpu_device probe (GA_EV_DEVICE): the
profiles' and /metrics' gpu_uuid and gpu_model labels, and a timeline's GPU tracks."""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import contract as C


@dataclass(frozen=True)
class GpuDevice:
    """A CUDA device as the shim saw it: its ordinal in the process, and the
    identity DCGM uses (UUID "GPU-…", model name)."""

    ordinal: int
    uuid: str = ""
    model: str = ""


def device_from_event(ev: C.EvDevice) -> GpuDevice:
    return GpuDevice(
        ev.ordinal,
        ev.uuid.split(b"\0", 1)[0].decode("ascii", "replace"),
        ev.model.split(b"\0", 1)[0].decode("utf-8", "replace"),
    )


# The node's GPUs when the NVIDIA driver's /proc entries cannot be read: an HGX
# board's eight. (A bound on a process's GPUs, not a count anything else uses.)
NODE_GPUS_UNKNOWN = 8


def node_gpus(root: str = "/proc/driver/nvidia/gpus") -> int:
    """How many GPUs the node has: the NVIDIA driver's /proc directories, one a GPU
    by PCI address (the host's, unless a container runtime showed the agent fewer),
    or NODE_GPUS_UNKNOWN where there is none to read."""
    try:
        n = len(os.listdir(root))
    except OSError:
        n = 0
    return n or NODE_GPUS_UNKNOWN
