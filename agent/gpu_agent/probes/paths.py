"""Where the agent finds its native parts: the shim, the BPF source, the contract header.

Search order for each: an explicit environment override, then the source tree
this package was installed from (editable installs and `make run`), then files
shipped inside the package (wheels and the container image).
"""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent  # the gpu_agent package
_REPO = _PKG.parent.parent  # agent/gpu_agent -> repo root
_SHIPPED = _PKG / "_native"


class MissingPartError(RuntimeError):
    pass


def _first(env: str, candidates: list[Path], what: str, fix: str) -> Path:
    override = os.environ.get(env)
    if override:
        p = Path(override)
        if not p.exists():
            raise MissingPartError(f"{what} not found at {env}={override}")
        return p.resolve()
    for p in candidates:
        if p.exists():
            return p.resolve()
    raise MissingPartError(f"{what} not found (looked in {', '.join(map(str, candidates))}); {fix}")


SHIM_NAME = "libgpu_agent_shim.so"
CUDA_MAJORS = (13, 12)  # the shim variants the container image ships, newest first


def shim_variants() -> dict[int, Path]:
    """CUDA major -> shim built against that CUDA's headers (_native/cuda<N>/, image and wheel)."""
    return {m: _SHIPPED / f"cuda{m}" / SHIM_NAME for m in CUDA_MAJORS if (_SHIPPED / f"cuda{m}" / SHIM_NAME).exists()}


def driver_cuda_major(proc_version: str = "/proc/driver/nvidia/version") -> int | None:
    """The CUDA major version this node's NVIDIA driver supports, or None without a driver.

    From the kernel module's version, which every container sees in /proc: CUDA 13 needs
    driver >= 580, CUDA 12 >= 525. (libcuda is deliberately not loaded into the agent to ask
    it: that would initialise a driver library inside a process that never uses the GPU.)"""
    try:
        with open(proc_version) as f:
            text = f.read()
    except OSError:
        return None
    import re

    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+)\.\d+", text) or re.search(r"\s(\d{3})\.\d+", text)
    if not m:
        return None
    driver = int(m.group(1))
    return 13 if driver >= 580 else 12 if driver >= 525 else 11


def pick_variant(cuda_major: int | None, variants: dict[int, Path]) -> Path | None:
    """The variant for this driver: the newest one not newer than the driver's CUDA, else the newest."""
    if not variants:
        return None
    fitting = [m for m in variants if cuda_major is None or m <= cuda_major]
    return variants[max(fitting or variants)]


def shim_path() -> Path:
    candidates = [_REPO / "build" / SHIM_NAME]
    variant = pick_variant(driver_cuda_major(), shim_variants())
    if variant is not None:
        candidates.append(variant)
    candidates.append(_SHIPPED / SHIM_NAME)
    return _first(
        "GPU_AGENT_SHIM", candidates, "the CUPTI shim", "run `make` in the gpu-agent checkout or set GPU_AGENT_SHIM"
    )


def bpf_dir() -> Path:
    return _first("GPU_AGENT_BPF_DIR", [_REPO / "bpf", _SHIPPED / "bpf"], "the BPF sources", "set GPU_AGENT_BPF_DIR")


def include_dir() -> Path:
    return _first(
        "GPU_AGENT_INCLUDE_DIR",
        [_REPO / "shim" / "include", _SHIPPED / "include"],
        "the probe contract header",
        "set GPU_AGENT_INCLUDE_DIR",
    )


def bpf_source(bpf_dir: Path, main: str = "gpu_agent.bpf.c") -> str:
    """bpf/gpu_agent.bpf.c (or one of its headers, main) with `#include "x.h"` of
    the headers that live in bpf/ pasted in, each once, where it is first included.

    bcc rewrites map calls (`m.lookup(&k)`) only in the main source text; in an
    #included file they stay calls through a NULL function pointer, which the
    verifier refuses ("unknown opcode 8d"). So our own BPF headers are pasted in.
    Each header includes what it uses, so that it compiles on its own
    (tests/test_bpf_session.py compiles each one).
    """
    import re

    seen: set[str] = set()

    def pasted(text: str) -> str:  # and the headers they include, in turn
        return re.sub(r'^#include "([\w.]+\.h)"[^\n]*$', paste, text, flags=re.M)

    def paste(m):
        path = bpf_dir / m.group(1)
        if not path.is_file():
            return m.group(0)
        if m.group(1) in seen:
            return ""
        seen.add(m.group(1))
        return pasted(path.read_text())

    return pasted((bpf_dir / main).read_text())
