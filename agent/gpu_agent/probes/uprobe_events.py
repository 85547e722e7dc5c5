"""The tracefs uprobe events that bcc's fallback creates for this agent's uprobes,
and the sweep that removes those that dead agents (or this one) left behind."""

from __future__ import annotations

import os
import re

from .preflight import TRACEFS_DIRS

# A uprobe event that bcc created in tracefs for one of our attaches, when the
# perf uprobe PMU refused it (bcc appends _bcc_<pid> to our ga_<pid>_... name).
_OUR_UPROBE_EVENT = re.compile(rb"^[pr]:(\S+?)/(ga_(\d+)_\d+_\w+_0x[0-9a-f]+_bcc_\d+)\s")


def sweep_uprobe_events(mine: bool = False) -> int:
    """Remove the tracefs uprobe events that agents created through bcc's fallback
    and left behind (a failed attach, a killed agent): those of agents that no
    longer run, and with mine, this one's. An event still in use stays (EBUSY).
    Returns how many were removed."""
    removed = 0
    for d in TRACEFS_DIRS:
        path = os.path.join(d, "uprobe_events")
        try:
            with open(path, "rb") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            m = _OUR_UPROBE_EVENT.match(line + b" ")
            if not m:
                continue
            pid = int(m.group(3))
            if pid == os.getpid():
                if not mine:
                    continue
            elif _alive(pid):
                continue
            try:  # os.open: Python's append mode seeks, which tracefs refuses
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, b"-:%s/%s\n" % (m.group(1), m.group(2)))
                finally:
                    os.close(fd)
                removed += 1
            except OSError:
                pass
        break  # one tracefs holds them all
    return removed


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")
