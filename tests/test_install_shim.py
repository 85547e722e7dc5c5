"""Shim variant choice by the driver's CUDA version, and the node install (atomic, idempotent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_agent.probes import paths
from gpu_agent.commands.install_shim import install_file


@pytest.mark.parametrize(
    "text,major",
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:58 UTC 2025\n", 13),
        ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build\n", 12),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n", 12),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02\n", 11),
    ],
)
def test_driver_cuda_major_from_kernel_module_version(tmp_path, text, major):
    f = tmp_path / "version"
    f.write_text(text)
    assert paths.driver_cuda_major(str(f)) == major
    assert paths.driver_cuda_major(str(tmp_path / "absent")) is None


def test_pick_variant():
    v = {12: Path("/x/cuda12/s.so"), 13: Path("/x/cuda13/s.so")}
    assert paths.pick_variant(13, v) == v[13]
    assert paths.pick_variant(12, v) == v[12]
    assert paths.pick_variant(None, v) == v[13]  # no driver visible: the newest
    assert paths.pick_variant(11, v) == v[13]  # nothing fits: the newest, CUDA refuses it loudly
    assert paths.pick_variant(14, {12: v[12]}) == v[12]
    assert paths.pick_variant(13, {}) is None


def test_install_file_is_atomic_and_keeps_the_inode_when_unchanged(tmp_path):
    src = tmp_path / "src.so"
    src.write_bytes(b"\x7fELF one")
    dst = tmp_path / "lib" / "libgpu_agent_shim.so"
    assert install_file(src, dst) is True
    ino = os.stat(dst).st_ino
    assert os.stat(dst).st_mode & 0o777 == 0o755
    assert install_file(src, dst) is False and os.stat(dst).st_ino == ino, "same bytes: untouched"
    src.write_bytes(b"\x7fELF two")
    assert install_file(src, dst) is True and dst.read_bytes() == b"\x7fELF two"
    assert [p.name for p in dst.parent.iterdir()] == ["libgpu_agent_shim.so"], "no temp files left"
