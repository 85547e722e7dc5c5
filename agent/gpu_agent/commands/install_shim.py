"""`gpu-agent install-shim --dest DIR`: put the shim where workloads on this node can load it.

The Kubernetes init container runs this onto a hostPath (/opt/gpu-agent/lib):
every GPU container mounts that directory and sets
CUDA_INJECTION64_PATH=/opt/gpu-agent/lib/libgpu_agent_shim.so, so all of them
map the same file and one path-based attach by the agent covers them all.

DIR/libgpu_agent_shim.so is the variant for this node's driver (CUDA 13 for
driver >= 580, else CUDA 12; --cuda-major overrides); DIR/cuda12/ and
DIR/cuda13/ hold both, for workloads that want to pin one. A file whose bytes
are already right is left alone: replacing it would give it a new inode, and
processes already running would keep the old one, which the agent's probes
(attached by path, i.e. to the new inode) would not cover until they restart.
"""

from __future__ import annotations

import filecmp
import sys
from pathlib import Path

from ..probes.paths import SHIM_NAME, driver_cuda_major, pick_variant, shim_path, shim_variants
from ..system.atomic import write_atomic


def add_parser(sub) -> None:
    p = sub.add_parser("install-shim", help="copy the shim (variant for this node's driver) into a directory")
    p.add_argument(
        "--dest",
        default="/opt/gpu-agent/lib",
        type=Path,
        help="target directory, e.g. a hostPath (default /opt/gpu-agent/lib)",
    )
    p.add_argument(
        "--cuda-major",
        default="auto",
        choices=["auto", "12", "13"],
        help="shim variant to install as DIR/" + SHIM_NAME + " (default: by the driver)",
    )
    p.set_defaults(func=main)


def install_file(src: Path, dst: Path) -> bool:
    """Atomically place src at dst (mode 0755) unless dst already has the same bytes. True if written."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and filecmp.cmp(src, dst, shallow=False):
        return False
    with open(src, "rb") as inp:
        write_atomic(dst, inp, mode=0o755)
    return True


def main(args) -> int:
    variants = shim_variants()
    detected = driver_cuda_major()
    major = detected if args.cuda_major == "auto" else int(args.cuda_major)
    if variants:
        chosen = pick_variant(major, variants)
    else:  # a source checkout or a wheel without variants: the one shim there is
        chosen = shim_path()
    dest = args.dest
    written = []
    for m, src in sorted(variants.items()):
        if install_file(src, dest / f"cuda{m}" / SHIM_NAME):
            written.append(f"cuda{m}/{SHIM_NAME}")
    if install_file(chosen, dest / SHIM_NAME):
        written.append(SHIM_NAME)
    how = (
        (f"driver supports CUDA {detected}" if detected else "no NVIDIA driver found")
        if args.cuda_major == "auto"
        else f"--cuda-major {args.cuda_major}"
    )
    print(
        f"gpu-agent: {dest / SHIM_NAME} <- {chosen} ({how}); "
        f"{'updated ' + ', '.join(written) if written else 'already up to date'}",
        file=sys.stderr,
    )
    print(dest / SHIM_NAME)
    return 0
