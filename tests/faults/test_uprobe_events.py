"""Uprobe events in tracefs are global and outlive their creator (issue 16, item 9):
bcc falls back to tracefs when the perf uprobe PMU refuses an attach, and such an
event stayed behind after a failed attach or a killed agent (one was found on this
machine: ga_11321_0_ga_kernel_batch_0x2833_bcc_11321). The agent removes what it
created when it closes or an attach fails, and, when it starts, what dead agents
left; never a live agent's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from gpu_agent.join.collector import Collector

from .faultkit import SHIM

UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")
DEAD_PID = 4194400  # above PID_MAX_LIMIT: never a running process


def events() -> str:
    return UPROBE_EVENTS.read_text()


def tracefs_write(line: str) -> None:
    fd = os.open(UPROBE_EVENTS, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


@pytest.fixture
def shim_copy(tmp_path, built):
    """A copy no other agent on the host uses (the suite runs beside one)."""
    p = tmp_path / "libgpu_agent_shim.so"
    shutil.copy(SHIM, p)
    return p


def test_events_that_dead_agents_left_are_removed_and_live_ones_kept(shim_copy):
    dead = f"ga_{DEAD_PID}_0_ga_attach_0x10_bcc_{DEAD_PID}"
    live = f"ga_{os.getppid()}_0_ga_attach_0x10_bcc_{os.getppid()}"  # a running process's
    tracefs_write(f"p:uprobes/{dead} {shim_copy}:0x10")
    tracefs_write(f"p:uprobes/{live} {shim_copy}:0x20")
    try:
        col = Collector(str(shim_copy), python_stacks=False)
        col.open()
        try:
            assert dead not in events() and live in events()
        finally:
            col.close()
        assert f"ga_{os.getpid()}_" not in events()
    finally:
        for name in (dead, live):
            if name in events():
                tracefs_write(f"-:uprobes/{name}")
