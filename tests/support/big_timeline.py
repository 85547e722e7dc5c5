"""A large kernel timeline for the UI's Timeline tab, through the agent's own
Perfetto writer (timeline/perfetto_trace.py): as many kernels as the default ring
keeps (250 000), on a few streams over seconds, every 97th launch sampled with a
launch stack, and a rare kernel (RARE) narrower than a pixel at the default zoom."""

from __future__ import annotations

from gpu_agent.probes.devices import GpuDevice
from gpu_agent.timeline.model import Frame, KernelEvent, Timeline

T0 = 1_760_000_000_000_000_000
PID = 4242
RARE = "rare_kernel(float*)"
RARE_EVERY = 10_007  # a prime: the rare kernel on every stream
SAMPLED_EVERY = 97
NAMES = [f"gemm_{i}<float, {i}>(float const*, float*, int)" for i in range(24)]


def stack_frames(s: int) -> list[Frame]:
    """Launch stack s, leaf first, as the agent records one."""
    return [
        Frame(f"launch_site_{s}", "native"),
        Frame("forward", "python", "model.py", 40 + s),
        Frame("main", "python", "train.py", 7),
    ]


def big_timeline(n: int = 250_000, span_ns: int = 5_000_000_000, streams: int = 4) -> Timeline:
    """n kernels back to back on `streams` streams over span_ns (each 3/4 of its
    slot), the kernel i named NAMES[i % 24] (RARE every RARE_EVERY)."""
    step = span_ns * streams // n
    kernels = []
    for i in range(n):
        at = T0 + (i // streams) * step
        sampled = i % SAMPLED_EVERY == 0
        name = RARE if i % RARE_EVERY == RARE_EVERY - 1 else NAMES[i % 24]
        kernels.append(
            KernelEvent(
                PID,
                at,
                at + step * 3 // 4,
                name,
                "_Z" + name.split("<")[0].split("(")[0],
                0,
                7 + 6 * (i % streams),
                1,
                i + 1,
                stack_id=i % 50 + 1 if sampled else None,
                launch_tid=PID if sampled else None,
                launch_ns=at - 5_000 if sampled else None,
            )
        )
    return Timeline(
        host="h",
        started_ns=T0,
        ended_ns=T0 + span_ns,
        processes={PID: "python"},
        devices={(PID, 0): GpuDevice(0, "GPU-big", "H100")},
        stacks={s: stack_frames(s) for s in range(1, 51)},
        kernels=kernels,
    )
