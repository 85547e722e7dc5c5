"""Opening files whose paths another (possibly hostile) local process controls.

A process can swap a path it owns for a FIFO or a device (a blocking open() would
hang the root agent for good), or for a symlink to a file it does not own (the
agent would then read, or attach uprobes to, that file). So such a file is opened
once, without blocking, checked on the open file (fstat: no window between check
and use), and then used only through that open file.
"""

from __future__ import annotations

import os
import stat
from typing import Optional


def open_regular(path: str, follow_symlinks: bool = True) -> Optional[tuple[int, os.stat_result]]:
    """(fd, its stat) if path opens, without blocking, as a regular file; else None.
    The caller checks the identity it expects (inode, device) and owns the fd.
    follow_symlinks=False refuses a path whose last component is a symlink (the UI's
    store: a link planted there must not serve a file from elsewhere)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        return None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st
