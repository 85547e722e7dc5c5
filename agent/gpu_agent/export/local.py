"""The local profile store: one gzip pprof per window in a directory, bounded in bytes.

A full or read-only disk drops the window (counted, said once per change of state)
and the agent keeps running. Past --max-store-bytes the oldest windows go first;
only the store's own files (gpu-*.pb.gz, whose names sort by time) are touched.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Optional

PATTERN = "gpu-*.pb.gz"


class LocalStore:
    def __init__(self, directory: Path, max_bytes: int = 0):
        self.dir = directory
        self.max_bytes = max_bytes          # 0: no bound
        self.written = 0
        self.write_failed = 0
        self.rotated = 0                    # windows removed to stay under max_bytes
        self._error: Optional[str] = None   # why the last write failed

    def write(self, profile) -> Optional[Path]:
        """Write one window; returns its path, or None when it was dropped."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        path = self.dir / f"gpu-{stamp}-{time.time_ns() % 10**9:09d}.pb.gz"
        try:
            profile.write(path)
        except OSError as e:
            self.write_failed += 1
            why = e.strerror or str(e)
            if why != self._error:
                print(f"gpu-agent: cannot write profiles into {self.dir}: {why}; dropping "
                      "windows (counted) until it can", file=sys.stderr, flush=True)
            self._error = why
            return None
        if self._error is not None:
            print(f"gpu-agent: writing profiles into {self.dir} again", file=sys.stderr, flush=True)
            self._error = None
        self.written += 1
        if self.max_bytes:
            self._rotate(keep=path)
        return path

    def _rotate(self, keep: Path) -> None:
        """Remove the oldest windows until the store fits max_bytes (never `keep`)."""
        files = []
        for p in self.dir.glob(PATTERN):
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
