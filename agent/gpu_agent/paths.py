"""Where the agent finds its native parts: the shim, the BPF source, the contract header.

Search order for each: an explicit environment override, then the source tree
this package was installed from (editable installs and `make run`), then files
shipped inside the package (wheels and the container image).
"""

from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent
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


def shim_path() -> Path:
    return _first("GPU_AGENT_SHIM", [_REPO / "build" / "libgpu_agent_shim.so",
                                     _SHIPPED / "libgpu_agent_shim.so"],
                  "the CUPTI shim", "run `make` in the gpu-agent checkout or set GPU_AGENT_SHIM")


def bpf_dir() -> Path:
    return _first("GPU_AGENT_BPF_DIR", [_REPO / "bpf", _SHIPPED / "bpf"],
                  "the BPF sources", "set GPU_AGENT_BPF_DIR")


def include_dir() -> Path:
    return _first("GPU_AGENT_INCLUDE_DIR", [_REPO / "shim" / "include", _SHIPPED / "include"],
                  "the probe contract header", "set GPU_AGENT_INCLUDE_DIR")
