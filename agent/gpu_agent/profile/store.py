"""The local store's format, writer's and reader's side: a directory of one gzip
pprof per profile interval, and the Perfetto traces put beside them.

`gpu-agent run` writes `gpu-YYYYmmddTHHMMSS-NNNNNNNNN.pb.gz` (export/local.py): the
UTC second and the nanoseconds within it at which the interval's profile was
written, i.e. its end. The UI places every file at that time, from its name alone, so listing a
store of thousands of files never opens one. A Perfetto trace that `record` or
`trace --store DIR` put there is named the same way, by its end:
`gpu-…-N.perfetto-trace` (docs/ui.md); nothing else in the directory is ever served.

Read-only and confined: names are matched against those two patterns (no slash, no
"..", no other file), and files are opened without following a symlink, as regular
files only (checked on the open file), without blocking (safe_open.py), and read
only up to a bound the caller gives. The directory itself must be root's, the
reader's own or sudo's invoker's, and writable by no one else unless sticky
(dir_error): whoever may write it decides what the UI serves (issue 44). Files in a
sticky directory may still be another user's, so every read stays bounded.
"""

from __future__ import annotations

import calendar
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..system.safe_open import open_regular, trusted_uids

PROFILE_SUFFIX = ".pb.gz"
TRACE_SUFFIX = ".perfetto-trace"
# The store's own files, as globs (the writer's rotation touches no other file).
PROFILE_GLOB = "gpu-*" + PROFILE_SUFFIX
TRACE_GLOB = "gpu-*" + TRACE_SUFFIX
_NAME = re.compile(r"^gpu-(\d{8}T\d{6})-(\d{9})(\.pb\.gz|\.perfetto-trace)$")
# A listing is reused this long: one page load makes several requests.
_LISTING_TTL_S = 1.0


@dataclass(frozen=True)
class StoreFile:
    name: str
    end_ns: int  # when the window was written (from the name)
    size: int
    mtime_ns: int

    @property
    def is_trace(self) -> bool:
        return self.name.endswith(TRACE_SUFFIX)


def file_name(end_ns: int, suffix: str) -> str:
    """The store's name for a file that ends at end_ns (CLOCK_REALTIME): the writer's
    side of time_of."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(end_ns // 1_000_000_000))
    return f"gpu-{stamp}-{end_ns % 1_000_000_000:09d}{suffix}"


def range_name(from_label: str, to_label: str, suffix: str) -> str:
    """The name of a download that covers a range (the UI's merged profile or traces)."""
    return f"gpu-{from_label}-{to_label}{suffix}"


def time_of(name: str) -> Optional[int]:
    """Nanoseconds since the epoch encoded in a store file's name, or None for any
    other name (which the UI then neither lists nor opens)."""
    m = _NAME.match(name)
    if not m:
        return None
    t = m.group(1)  # YYYYmmddTHHMMSS, read by hand: strptime costs more than the listing
    fields = (int(t[0:4]), int(t[4:6]), int(t[6:8]), int(t[9:11]), int(t[11:13]), int(t[13:15]))
    if not (1 <= fields[1] <= 12 and 1 <= fields[2] <= 31 and fields[3] < 24 and fields[4] < 60 and fields[5] < 61):
        return None
    return calendar.timegm(fields + (0, 0, 0)) * 1_000_000_000 + int(m.group(2))


class Store:
    """The listing of one directory, refreshed at most once a second."""

    def __init__(self, directory: Path):
        self.dir = Path(directory).resolve()
        self._lock = threading.Lock()
        self._listed_at = 0.0
        self._profiles: list[StoreFile] = []
        self._traces: list[StoreFile] = []

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._listed_at < _LISTING_TTL_S:
            return
        profiles, traces = [], []
        try:
            entries = list(os.scandir(self.dir))
        except OSError:
            entries = []  # a store not created yet (the agent makes it at its first window)
        for e in entries:
            t = time_of(e.name)
            if t is None:
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # rotated away meanwhile
            f = StoreFile(e.name, t, st.st_size, st.st_mtime_ns)
            (traces if f.is_trace else profiles).append(f)
        profiles.sort(key=lambda f: (f.end_ns, f.name))
        traces.sort(key=lambda f: (f.end_ns, f.name))
        self._profiles, self._traces, self._listed_at = profiles, traces, now

    def profiles(self) -> list[StoreFile]:
        with self._lock:
            self._refresh()
            return self._profiles

    def traces(self) -> list[StoreFile]:
        with self._lock:
            self._refresh()
            return self._traces

    def in_range(self, from_ns: int, to_ns: int, traces: bool = False) -> list[StoreFile]:
        """Files whose window ended in (from_ns, to_ns]: adjacent ranges share none."""
        return [f for f in (self.traces() if traces else self.profiles()) if from_ns < f.end_ns <= to_ns]

    def open(self, name: str) -> Optional[tuple[int, os.stat_result]]:
        """(fd, its fstat) of one store file, or None: a name of another form, a
        symlink (O_NOFOLLOW), a FIFO or anything but a regular file (checked on the
        open file), a file that went away. The name never leaves the directory. The
        caller owns the fd."""
        if time_of(name) is None:
            return None
        return open_regular(str(self.dir / name), follow_symlinks=False)

    def read(self, name: str, limit: int) -> Optional[bytes]:
        """The bytes of one store file, at most limit + 1 of them (more than limit: the
        caller refuses it), or None as open() says. Never the whole of a file of
        unknown size: the store may be written by others (a 2 GiB sparse file)."""
        opened = self.open(name)
        if opened is None:
            return None
        fd, _st = opened
        with os.fdopen(fd, "rb") as f:
            return f.read(limit + 1)

    def summary(self) -> dict:
        """What the status page says of the store itself."""
        profiles, traces = self.profiles(), self.traces()
        return {
            "directory": str(self.dir),
            "exists": self.dir.is_dir(),
            "profiles": len(profiles),
            "traces": len(traces),
            "bytes": sum(f.size for f in profiles) + sum(f.size for f in traces),
            "first_ns": profiles[0].end_ns if profiles else None,
            "last_ns": profiles[-1].end_ns if profiles else None,
        }


def dir_error(directory: Path) -> Optional[str]:
    """Why the UI may not serve this store, or None (also for a store not made yet:
    `run` makes it). Checked on the opened directory (no window between check and
    use): it must be root's, this user's or sudo's invoker's (the owner decides what
    it holds), and not writable by group or others unless sticky (as /tmp: others
    may add files, never replace or remove the owner's). Owners as TokenFile's."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot open {directory}: {e.strerror or e}"
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    owners = trusted_uids()
    if st.st_uid not in owners:
        return (
            f"{directory} is uid {st.st_uid}'s: the UI serves a store of "
            f"uid {', '.join(map(str, sorted(owners)))} only (its owner decides what it serves)"
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "others" if st.st_mode & 0o002 else "its group"
        return (
            f"{directory} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}), who could replace "
            "its files: chmod go-w, or +t as /tmp"
        )
    return None
