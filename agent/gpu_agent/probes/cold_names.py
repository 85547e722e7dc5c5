"""Kernel names BPF could not read, read by the agent instead.

parcagpu hands over a pointer to each kernel's name. Where that page is not
resident in the process (a library's string table not yet touched, a page
swapped out), BPF cannot fault it in, and every record of the kernel would stay
[unknown kernel]. BPF then sends GA_EV_PG_NAME once per process and name, and
the agent reads the name from /proc/PID/mem, which does fault pages in.

The address is the process's own choice, so every request is hostile:
  identity  /proc/PID/mem is opened just before the read, then the process's
            BPF start tag must still be the event's: the process that fired was
            alive after the open, so the fd holds its memory, never a successor's
            (BPF drops the tag at exit, before a pid can be reused);
  size      at most GA_PG_NAME_CHUNKS x GA_NAME_CHUNK bytes (where BPF cuts a
            name), read page by page up to the NUL;
  number    MAX_WAITING requests waiting or in flight in all, PER_PROCESS of one
            process (a few dozen bytes each, no fd); the rest are refused, and
            forgotten in BPF (forget(), pg_names), so that the kernel's next record
            asks again;
  time      reads run on one worker thread, never on the agent's loop: a read the
            kernel holds (a FUSE page that never comes) stalls only that thread,
            and once MAX_WAITING requests wait, further ones are refused.
Every refusal or failed read is counted (agent_drop_cold_name); names read go
back to the loop (apply()), which names the kernel with them, unverified like
every parcagpu name (names.py).
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from typing import Callable, Optional

from . import contract as C
from ..system.procmem import ProcMem

MAX_WAITING = 4096
PER_PROCESS = 1024
MAX_LEN = C.PG_NAME_CHUNKS * C.NAME_CHUNK
PAGE = 4096


def read_c_string(mem: ProcMem, address: int, limit: int = MAX_LEN) -> bytes:
    """The NUL-terminated string at address (cut at limit), one page per read so
    that a name at a mapping's end reads; OSError if unreadable or empty."""
    out = bytearray()
    while len(out) < limit:
        at = address + len(out)
        data = mem.read(at, min(PAGE - at % PAGE, limit - len(out)))
        end = data.find(b"\0")
        if end >= 0:
            out += data[:end]
            break
        out += data
    if not out:
        raise OSError(0, f"an empty name at {address:#x}")
    return bytes(out)


class ColdNames:
    def __init__(
        self,
        counts: dict[str, int],
        start_of: Callable[[int], Optional[int]],
        forget: Callable[[int, int, int], None],
        proc_root: str = "/proc",
    ):
        self.counts = counts  # the session's agent-side counters, updated in place
        counts.setdefault("cold_names_read", 0)
        counts.setdefault("drop_cold_name", 0)
        self._start_of = start_of  # tgid -> its BPF start tag, None once gone
        self._forget = forget  # (tgid, start, address): BPF asks again at the next record
        self._root = proc_root
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting: Counter[int] = Counter()  # the loop's thread only
        self._total = 0
        self._worker: Optional[threading.Thread] = None

    def submit(self, tgid: int, start: int, kernel_id: int, address: int) -> None:
        """A GA_EV_PG_NAME event (the agent's loop)."""
        if self._total >= MAX_WAITING or self._waiting[tgid] >= PER_PROCESS or not address:
            self.counts["drop_cold_name"] += 1
            self._forget(tgid, start, address)
            return
        self._waiting[tgid] += 1
        self._total += 1
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="cold-names", daemon=True)
            self._worker.start()
        self._todo.put((tgid, start, kernel_id, address))

    def _read(self, tgid: int, start: int, address: int) -> Optional[bytes]:
        try:
            mem = ProcMem(tgid, self._root)
        except OSError:
            return None
        try:
            if self._start_of(tgid) != start:  # gone, or another process now: not its memory
                return None
            return read_c_string(mem, address)
        except (OSError, OverflowError, ValueError):
            return None
        finally:
            mem.close()

    def _work(self) -> None:
        while True:
            item = self._todo.get()
            if item is None:
                return
            tgid, start, kernel_id, address = item
            self._done.put((tgid, kernel_id, self._read(tgid, start, address)))

    def apply(self, names) -> None:
        """Names read so far go to `names` (KernelNames); the agent's loop."""
        while True:
            try:
                tgid, kernel_id, name = self._done.get_nowait()
            except queue.Empty:
                return
            self._waiting[tgid] -= 1
            self._total -= 1
            if self._waiting[tgid] <= 0:
                del self._waiting[tgid]
            if name:
                names.unverified(kernel_id, name)
                self.counts["cold_names_read"] += 1
            else:
                self.counts["drop_cold_name"] += 1

    def close(self) -> None:
        """The worker ends after its read (a read the kernel holds: a daemon thread)."""
        if self._worker is not None:
            self._todo.put(None)
            self._worker = None
