"""The local profile store: one gzip pprof per window in a directory, bounded in bytes.

A backend like parca and otlp (the interface is backends.ProfileBackend), without a
send queue: a window is written when it closes, so there is nothing to hold back,
retry or flush at the end.

A full or read-only disk drops the window (counted, said once per change of state)
and the agent keeps running. Past --max-store-bytes the oldest windows go first;
only the store's own files (profile/store.py's PROFILE_GLOB, whose names sort by time)
are touched.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Optional

from ...profile.store import PROFILE_GLOB, PROFILE_SUFFIX, file_name


class LocalStore:
    name = "local"  # in the status line
    per_process = False  # one profile of every process per window (window.profile)

    def __init__(self, directory: Path, max_bytes: int = 0):
        self.dir = directory
        self.max_bytes = max_bytes  # 0: no bound
        self.written = 0
        self.write_failed = 0
        self.rotated = 0  # windows removed to stay under max_bytes
        self._error: Optional[str] = None  # why the last write failed

    def describe(self) -> str:
        return f"into {self.dir}"

    def has_room(self) -> bool:
        return True  # written at once: the store never holds a window open

    def submit(self, window) -> Optional[Path]:
        """Write one window; returns its path, or None when it was dropped."""
        # named by the interval's end, not the write: an interval waits for its shims'
        # periods (join/placement.py), and the UI's ranges go by these names
        b = window.profile
        end = b.time_nanos + b.duration_ns if b.time_nanos else time.time_ns()
        path = self.dir / file_name(end, PROFILE_SUFFIX)
        try:
            window.profile.write(path)
        except OSError as e:
            self.write_failed += 1
            why = e.strerror or str(e)
            if why != self._error:
                print(
                    f"gpu-agent: cannot write profiles into {self.dir}: {why}; dropping windows (counted) until it can",
                    file=sys.stderr,
                    flush=True,
                )
            self._error = why
            return None
        if self._error is not None:
            print(f"gpu-agent: writing profiles into {self.dir} again", file=sys.stderr, flush=True)
            self._error = None
        self.written += 1
        if self.max_bytes:
            self._rotate(keep=path)
        return path

    def profile_counts(self) -> dict:
        return {"written": self.written, "rotated": self.rotated, "write_failed": self.write_failed}

    def queue_stats(self):
        return None  # no send queue: its windows are counted in profile_counts only

    def status(self) -> str:
        """Said only once something was lost or removed: a healthy store adds nothing."""
        if not (self.write_failed or self.rotated):
            return ""
        return f" local=dropped:{self.write_failed},rotated:{self.rotated}"

    def close(self, flush_timeout: float = 0.0) -> None:
        pass  # every window is on disk (or counted as dropped) when submit returns

    def _rotate(self, keep: Path) -> None:
        """Remove the oldest windows until the store fits max_bytes (never `keep`)."""
        files = []
        for p in self.dir.glob(PROFILE_GLOB):
            try:
                files.append((p.name, p, p.stat().st_size))
            except OSError:
                continue  # removed meanwhile
        files.sort()
        total = sum(size for _, _, size in files)
        for _, p, size in files:
            if total <= self.max_bytes or p == keep:
                break
            try:
                os.unlink(p)
            except OSError:
                continue
            total -= size
            self.rotated += 1
