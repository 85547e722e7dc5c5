"""`gpu-agent shim-path`: print the shim's absolute path, for CUDA_INJECTION64_PATH=$(...)."""

from __future__ import annotations

from ..probes.paths import shim_path


def add_parser(sub) -> None:
    p = sub.add_parser("shim-path", help="print the absolute path of the CUPTI shim")
    p.set_defaults(func=main)


def main(args) -> int:
    print(shim_path())
    return 0
