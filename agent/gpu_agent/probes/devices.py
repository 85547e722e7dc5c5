"""A process's CUDA devices, from the shim's gpu_device probe (GA_EV_DEVICE): the
profiles' and /metrics' gpu_uuid and gpu_model labels, and a timeline's GPU tracks."""

from __future__ import annotations

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
